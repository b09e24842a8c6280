"""API side of the live feed: one `Channel` per watched run, shared by all its SSE clients.

A channel's pump reads new events once (Redis `XREAD BLOCK` on the run's stream, or the embedded
form's tail of the store every `feed_poll_s`) and keeps them in memory, contiguous by seq. Clients
behind the channel's window read the store, so a late joiner gets the whole history, then the live
events, keyed by seq: no gap and no duplicate.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

import anyio

from normlab.feed.redis_feed import is_terminal_row, stream_key
from normlab.settings import Settings
from normlab.store import EventRow, Store, event_json
from normlab_client.events import TERMINAL_STATUSES

log = logging.getLogger(__name__)
WINDOW = 20_000  # events a channel keeps in memory (older ones come from the store)
IDLE_CHECK_S = 1.0  # how often a quiet pump checks the store for a run that ended or vanished
PUMP_RETRY_S = 1.0  # a pump whose store or Redis read failed tries again after this long


@dataclass(frozen=True, slots=True)
class Frame:
    seq: int
    kind: str
    terminal: bool
    data: str  # the Event JSON
    sse: bytes  # the SSE frame with id = seq (single-run streams send this unchanged)


def frame_from_row(run_id: str, row: EventRow) -> Frame:
    data = event_json(run_id, row)
    return _frame(row.seq, row.kind, is_terminal_row(row), data)


def _frame(seq: int, kind: str, terminal: bool, data: str) -> Frame:
    return Frame(seq, kind, terminal, data, f"id: {seq}\r\nevent: {kind}\r\ndata: {data}\r\n\r\n".encode())


def frames_filling_gaps(run_id: str, last: int, rows: list[EventRow]) -> list[Frame]:
    """Frames for store rows after seq `last`, with a `log` warning standing in for each sequence number
    the store skips. One writer stores a run's events in order, so a number missing below a stored one
    will never come (it was lost in a fault): a viewer moves on, told so, instead of waiting forever."""
    frames: list[Frame] = []
    expected = last + 1
    for row in rows:
        for seq in range(expected, row.seq):
            payload = {
                "level": "warning",
                "missing": True,
                "message": f"Event {seq} of this run was never stored (lost in a fault); the stream "
                "moves on.",
            }
            frames.append(
                frame_from_row(
                    run_id,
                    EventRow(seq, row.step, "log", row.time, json.dumps(payload, separators=(",", ":"))),
                )
            )
        frames.append(frame_from_row(run_id, row))
        expected = row.seq + 1
    return frames


class Channel:
    """The in-memory tail of one run's events (seq base+1 … last) and a wake-up for its clients."""

    def __init__(self, run_id: str, base: int):
        self.run_id = run_id
        self.base = base
        self.frames: list[Frame] = []
        self.done = False
        self.refs = 0
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def last(self) -> int:
        return self.base + len(self.frames)

    def since(self, cursor: int) -> list[Frame] | None:
        """Frames after `cursor`, or None when the cursor is older than the window (read the store)."""
        if cursor < self.base:
            return None
        return self.frames[cursor - self.base :]

    def append(self, frames: list[Frame]) -> None:
        for f in frames:
            if f.seq != self.last + 1:  # the pumps only hand over contiguous frames; be safe
                continue
            self.frames.append(f)
            if f.terminal:
                self.done = True
        if len(self.frames) > WINDOW:
            drop = len(self.frames) - WINDOW // 2
            self.frames = self.frames[drop:]
            self.base += drop
        self.notify()

    def finish(self) -> None:
        self.done = True
        self.notify()

    def notify(self) -> None:
        ev, self.changed = self.changed, asyncio.Event()
        ev.set()


class FeedHub:
    """Hands out shared channels; the first client of a run starts its pump, the last one stops it."""

    def __init__(self, store: Store, settings: Settings):
        self.store, self.settings = store, settings
        self.channels: dict[str, Channel] = {}
        self.redis: Any = None
        if settings.uses_redis_feed:
            import redis.asyncio as aioredis

            self.redis = aioredis.Redis.from_url(settings.redis_url)

    async def acquire(self, run_id: str, last_seq: int, terminal: bool) -> Channel:
        ch = self.channels.get(run_id)
        if ch is None:
            ch = self.channels[run_id] = Channel(run_id, last_seq)
            if terminal:
                ch.done = True  # nothing more will come; clients read the store
            else:
                ch.task = asyncio.create_task(self._pump(ch), name=f"feed-{run_id}")
        ch.refs += 1
        return ch

    def release(self, ch: Channel) -> None:
        ch.refs -= 1
        if ch.refs <= 0 and self.channels.get(ch.run_id) is ch:
            del self.channels[ch.run_id]
            if ch.task is not None:
                ch.task.cancel()

    async def close(self) -> None:
        for ch in list(self.channels.values()):
            if ch.task is not None:
                ch.task.cancel()
            ch.finish()
        self.channels.clear()
        if self.redis is not None:
            await self.redis.aclose()

    # ---- pumps --------------------------------------------------------------------------------
    async def _pump(self, ch: Channel) -> None:
        while not ch.done:
            try:
                if self.redis is not None:
                    await self._pump_redis(ch)
                else:
                    await self._pump_store(ch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away: viewers keep their stream (heartbeats) and
                # get the rest once it is back; ending it would drop them before the run's end
                log.warning(
                    "live feed for run %s: %s; retrying in %.0f s",
                    ch.run_id,
                    str(getattr(exc, "orig", None) or exc)[:200],
                    PUMP_RETRY_S,
                )
                await asyncio.sleep(PUMP_RETRY_S)

    async def _from_store(self, ch: Channel, limit: int = 2000) -> int:
        rows = await anyio.to_thread.run_sync(self.store.events_after, ch.run_id, ch.last, limit)
        if rows:
            ch.append(frames_filling_gaps(ch.run_id, ch.last, rows))
        return len(rows)

    async def _check_ended(self, ch: Channel) -> None:
        """End the channel when the run vanished, or ended with nothing left to read."""
        run = await anyio.to_thread.run_sync(self.store.get_run, ch.run_id)
        if run is None:
            ch.finish()
        elif run["status"] in TERMINAL_STATUSES and run["last_seq"] <= ch.last:
            ch.finish()

    async def _pump_store(self, ch: Channel) -> None:
        idle = 0.0
        while not ch.done:
            if await self._from_store(ch):
                idle = 0.0
                continue
            await asyncio.sleep(self.settings.feed_poll_s)
            idle += self.settings.feed_poll_s
            if idle >= IDLE_CHECK_S:
                idle = 0.0
                await self._check_ended(ch)

    async def _pump_redis(self, ch: Channel) -> None:
        import redis

        key = stream_key(self.settings, ch.run_id)
        await self._from_store(ch, limit=10**6)  # what was written before the channel existed
        while not ch.done:
            try:
                resp = await self.redis.xread({key: f"{ch.last}-0"}, count=1000, block=1000)
            except redis.RedisError as exc:
                log.warning("live feed: Redis read failed (%s); reading the store", exc)
                resp = None
                await asyncio.sleep(0.5)
            entries: list[Any] = resp[0][1] if resp else []
            if not entries:  # quiet (or Redis trouble): catch up from the store, then check the run
                if not await self._from_store(ch):
                    await self._check_ended(ch)
                continue
            first = int(entries[0][0].split(b"-")[0])
            if first > ch.last + 1:  # trimmed or missed: the store has everything up to here
                await self._from_store(ch, limit=first - ch.last - 1)
            frames: list[Frame] = []
            for entry_id, fields in entries:
                seq = int(entry_id.split(b"-")[0])
                if seq > ch.last + len(frames):
                    frames.append(
                        _frame(seq, fields[b"k"].decode(), fields[b"t"] == b"1", fields[b"d"].decode())
                    )
            ch.append(frames)
