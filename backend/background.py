"""The API's background loops (the reaper, the broker and orphan watches, its presence note) run
supervised: no exception ends one and no stuck call wedges one.

- `supervise(name, loop)`: whatever ends the loop other than its own cancellation (any exception, a
  stray CancelledError raised inside it) is logged with its traceback, and the loop starts again.
- `BoundedCalls`: the loop's blocking calls run in threads of its own (request threads busy with
  slow reads or long replays cannot starve it), each given up after a bound. Every store call already
  has a deadline (normlab/store/deadline.py); the bound is the backstop for anything that escapes it
  (a socket the watchdog never saw, a client library without a timeout). The abandoned thread finishes
  or stays blocked on its own; the loop goes on with a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio

log = logging.getLogger(__name__)
T = TypeVar("T")


class CallTimeout(TimeoutError):
    """A background call did not return within its bound and was given up."""


def call_bound_s(db_timeout_s: float, is_sqlite: bool) -> float:
    """How long a background store call may take before it is given up: a checkout's wait for a free
    connection, a new connection and the statement each get the database deadline, plus slack. SQLite
    waits up to 30 s for a writer's lock (its busy_timeout), which is not a stuck call."""
    return 35.0 if is_sqlite else 4 * db_timeout_s + 2.0


class BoundedCalls:
    """Blocking calls in up to `threads` threads of the loop's own, each given up after `bound_s`."""

    def __init__(self, bound_s: float, threads: int = 2):
        self.bound_s, self.threads = bound_s, threads
        self._limiter: anyio.CapacityLimiter | None = None

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        if self._limiter is None:  # made inside the event loop
            self._limiter = anyio.CapacityLimiter(self.threads)
        try:
            with anyio.fail_after(self.bound_s):
                return await anyio.to_thread.run_sync(
                    fn, *args, limiter=self._limiter, abandon_on_cancel=True
                )
        except TimeoutError as exc:
            name = getattr(fn, "__qualname__", repr(fn))
            raise CallTimeout(f"{name} did not return within {self.bound_s:.1f} s; given up") from exc


async def supervise(name: str, loop: Callable[[], Coroutine[Any, Any, None]], restart_s: float = 1.0) -> None:
    """Run `loop()` until it returns; start it again (after `restart_s`) whenever anything else ends it.
    Only this task's own cancellation (the API shutting down) and the interpreter's exits get through."""
    while True:
        try:
            await loop()
            return
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            log.error("%s: a stray cancellation ended it; starting it again", name, exc_info=True)
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException:
            log.exception("%s died; starting it again in %.1f s", name, restart_s)
        await asyncio.sleep(restart_s)


async def presence_loop(store: Any, call_bound: float) -> None:
    """Note this API process in the store every few seconds (`normlab restore` refuses a store in use),
    and take the note back when the API stops."""
    from normlab.store import presence

    name, call = presence.api_name(), BoundedCalls(call_bound, threads=1)
    try:
        while True:
            try:
                await call(presence.note_api, store, name)
            except Exception as exc:  # the database is away: the next pass notes it again
                log.warning("presence: %s", str(exc)[:200])
            await asyncio.sleep(presence.PERIOD_S)
    finally:
        with contextlib.suppress(Exception):
            presence.forget_api(store, name)
