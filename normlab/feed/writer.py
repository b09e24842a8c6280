"""Writing a run's events (the worker uses it): `EventWriter` batches them into the store and the live
feed; `RunWatch` keeps the run's heartbeat and turns a cancel request into a cheap `should_stop()`."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from sqlalchemy.exc import IntegrityError

from normlab.store import EventRow, Store
from normlab.store.rollup import RollupBuilder, bucket_rows
from normlab_client.events import Event

log = logging.getLogger(__name__)
# A batch that cannot be stored (database away) is retried with doubling waits up to RETRY_MAX_S, for as
# long as it takes: events are never dropped and never reordered; what the engine emits meanwhile
# queues up behind it in memory.
RETRY_FIRST_S, RETRY_MAX_S = 0.1, 2.0


class Publisher(Protocol):
    """Where written events go live too (normlab.feed.redis_feed.RedisPublisher)."""

    def publish(self, run_id: str, rows: list[EventRow]) -> None: ...


def finite(obj: object) -> object:
    """JSON has no NaN/Infinity (browsers reject them): non-finite floats become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def payload_text(payload: Mapping[str, object]) -> str:
    try:
        return json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return json.dumps(finite(payload), separators=(",", ":"))


class EventWriter:
    """Collects events from the engine's callback and writes them every `flush_s` (at once for
    status events) from a background thread, so the training loop never waits on the database.

    The terminal status event is held back and written by `close()` in the same transaction as the
    run's final status and summary: a client that sees it and then GETs the run sees it finished."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        publisher: Publisher | None = None,
        flush_s: float = 0.05,
    ):
        self.store, self.run_id, self.publisher, self.flush_s = store, run_id, publisher, flush_s
        self.last_seq = 0
        self.broken = False  # the store refused our events (the run was declared lost meanwhile)
        self.terminal: EventRow | None = None
        self._pending: list[EventRow] = []
        self._rollup = RollupBuilder()
        self._cond = threading.Condition()
        self._closing = False
        self._urgent = False
        self._thread = threading.Thread(target=self._loop, name=f"events-{run_id}", daemon=True)
        self._thread.start()

    def continue_stored(self) -> int:
        """Continue a run that has stored events (a resumed run): its next event follows its last stored
        one, and the roll-up buckets still open are rebuilt from its stored scalars events. Call before
        the first `emit`; returns the last stored sequence number."""
        for row in self.store.iter_events(self.run_id, kind="scalars"):
            self._rollup.add(row.seq, row.step, row.time, json.loads(row.payload))  # stored: closed ones too
        run = self.store.get_run(self.run_id)
        self.last_seq = run["last_seq"] if run is not None else 0
        return self.last_seq

    def emit(self, event: Event) -> None:
        row = EventRow(event.seq, event.step, event.kind, event.time, payload_text(event.payload))
        with self._cond:
            self.last_seq = max(self.last_seq, row.seq)
            if event.terminal:
                self.terminal = row
                return
            self._pending.append(row)
            if event.kind == "status" or len(self._pending) >= 2000:
                self._urgent = True
                self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._closing and not self._urgent:
                    self._cond.wait(self.flush_s)  # batch what arrives meanwhile into one transaction
                rows, self._pending, self._urgent = self._pending, [], False
                closing = self._closing
            if rows:
                self._write(rows)
            if closing:
                return

    def _write(self, rows: list[EventRow], finish: dict[str, Any] | None = None) -> None:
        if self.broken:
            return
        buckets = []
        scalars = 0
        for row in rows:
            if row.kind == "scalars":
                scalars += 1
                buckets += bucket_rows(self._rollup.add(row.seq, row.step, row.time, json.loads(row.payload)))
        delay = RETRY_FIRST_S
        while True:
            try:
                self.store.append_events(self.run_id, rows, buckets, scalars, finish)
                break
            except IntegrityError:
                log.error(
                    "run %s: the store already has these sequence numbers (declared lost?); stopping",
                    self.run_id,
                )
                self.broken = True
                return
            except Exception as exc:  # the database is away: keep these rows (and their order), retry
                reason = str(getattr(exc, "orig", None) or exc)[:200]
                log.warning(
                    "run %s: could not store events %d-%d (%s: %s); retrying in %.1f s",
                    self.run_id,
                    rows[0].seq,
                    rows[-1].seq,
                    type(exc).__name__,
                    reason,
                    delay,
                )
                self.store.after_held_up(exc)
                time.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)
        if self.publisher is not None:
            self.publisher.publish(self.run_id, rows)

    def close(self, finish: dict[str, Any], fallback_status: dict[str, Any]) -> None:
        """Write what is pending, then the terminal event (the engine's, or one built from
        `fallback_status` if it never sent one) together with the run's `finish` columns. (A run that
        yielded its worker closes the same way with status `queued`: not terminal, it goes on later.)"""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
        rows = list(self._pending)
        if self.terminal is None:
            self.terminal = EventRow(
                self.last_seq + 1,
                int(fallback_status.pop("step", 0)),
                "status",
                fallback_status.pop("time"),
                payload_text(fallback_status),
            )
        rows.append(self.terminal)
        self._write(rows, finish)


class RunWatch:
    """A thread that writes the run's heartbeat every `heartbeat_s` and checks for a cancel request
    every `poll_s`; `should_stop()` is then a flag read, cheap enough to call every step."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        heartbeat_s: float,
        poll_s: float = 0.2,
        writer: EventWriter | None = None,
    ):
        self.store, self.run_id, self.heartbeat_s, self.poll_s = store, run_id, heartbeat_s, poll_s
        self.writer = writer
        self._stop = threading.Event()
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"watch-{run_id}", daemon=True)
        self._thread.start()

    def should_stop(self) -> bool:
        return self._cancel.is_set() or (self.writer is not None and self.writer.broken)

    def _loop(self) -> None:
        import time

        next_beat = 0.0
        while not self._stop.wait(self.poll_s):
            try:
                now = time.monotonic()
                if now >= next_beat:
                    self.store.heartbeat(self.run_id)
                    next_beat = now + self.heartbeat_s
                if self.store.cancel_requested(self.run_id):
                    self._cancel.set()
            except Exception as exc:  # a database blip must not kill the run; the next poll retries
                log.warning("run %s: heartbeat/cancel check failed: %s", self.run_id, exc)
                # held up by row locks a session cut off in an outage keeps: end it, or no heartbeat
                # gets through until the event writer's next retry does so
                self.store.after_held_up(exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
