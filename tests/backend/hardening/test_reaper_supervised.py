"""The reaper can neither die nor wedge: a store call that never returns is given up and the next pass
marks the dead worker's run lost; an exception of any kind (even one that is not an `Exception`, even a
stray CancelledError) is logged and the loop starts again. Only the API's own shutdown stops it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time

import pytest

from backend.background import supervise
from backend.reaper import reaper_loop


class _Store:
    """One running run whose worker is dead (its heartbeat is old). `first` decides how the reaper's
    first look at the stale runs goes: it blocks until the test ends, or raises."""

    timeout_s = None  # (the store's deadline: none here)

    def __init__(self, first):
        self.first, self.looks, self.lost = first, 0, []
        self.release = threading.Event()

    def ping(self) -> None:
        pass

    def stale_runs(self, older_than: float) -> list[str]:
        self.looks += 1
        if self.looks == 1:
            self.first(self)
        return [] if self.lost else ["r"]

    def finish_with_status(self, run_id, status, message, only_from, stale_before=None):
        self.lost.append((run_id, status))
        return {"status": status}


def _block(store: _Store) -> None:
    store.release.wait()  # a connection nobody ever cuts


class _Odd(BaseException):
    """Not an Exception: the old loop's `except Exception` let it end the task."""


def _raise_odd(store: _Store) -> None:
    raise _Odd("boom")


def _raise_stray_cancel(store: _Store) -> None:
    raise asyncio.CancelledError  # raised inside the call, not a cancellation of the task


def _reap_until_lost(store: _Store, limit_s: float = 20.0) -> None:
    """Run the supervised reaper (lost after 0.5 s, heartbeat 0.1 s, calls given up after 0.5 s) until
    the run is lost or `limit_s` passes, then shut it down the way the API does."""

    async def main():
        task = asyncio.create_task(
            supervise("reaper", lambda: reaper_loop(store, 0.5, heartbeat_s=0.1, call_bound_s=0.5), 0.1)
        )
        deadline = time.monotonic() + limit_s
        while not store.lost and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.05)
        store.release.set()  # a reaper still blocked in it can take the cancellation now
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled(), "the reaper task ended on its own instead of being cancelled"

    try:
        asyncio.run(main())
    finally:
        store.release.set()


@pytest.mark.parametrize("first", [_block, _raise_odd, _raise_stray_cancel])
def test_the_reaper_survives_a_stuck_or_failing_call_and_still_marks_the_run_lost(first, caplog):
    store = _Store(first)
    with caplog.at_level(logging.WARNING):
        _reap_until_lost(store)
    assert store.looks >= 2, "the reaper never looked again after its first call"
    assert store.lost == [("r", "lost")]
    said = caplog.text
    if first is _block:
        assert "given up" in said  # the stuck call is logged, not silent
    else:
        assert "starting it again" in said  # the crash is logged with its traceback
        assert ("_Odd" in said) if first is _raise_odd else ("stray cancellation" in said)


def test_a_loop_that_returns_is_not_restarted():
    calls = []

    async def once():
        calls.append(1)

    asyncio.run(asyncio.wait_for(supervise("once", once, 0.01), 5))
    assert calls == [1]
