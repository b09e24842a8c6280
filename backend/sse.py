"""Server-Sent Event streams of one run or several (multiplexed), resumable by cursor.

Single run: `id:` is the event's seq. Multiplexed: `id:` is the cursor "runA:12,runB:7" (each run's last
seq sent), and `data:` carries the Event JSON with its run_id. A run's part ends after its terminal
status event; the response ends when every run's part has.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import anyio

from backend.feed.hub import Channel, FeedHub, Frame, frames_filling_gaps
from normlab.store import RunRow, Store
from normlab_client.events import ACTIVE_STATUSES

RETRY_MS = 2000  # how soon a browser's EventSource reconnects after a drop
_CURSOR_PART = re.compile(r"^([0-9a-f]{1,32}):([0-9]{1,12})$")  # ASCII digits only


class CursorError(ValueError):
    """A Last-Event-ID / after= value that this API did not produce."""


def parse_single_cursor(value: str | None) -> int:
    """None (not given) is the start; an empty or malformed value is refused, never read as 0."""
    if value is None:
        return 0
    if not (value.isascii() and value.isdigit()) or len(value) > 12:  # "١٢".isdigit() is True
        raise CursorError(f"Last-Event-ID / after must be an event sequence number (got {value[:40]!r}).")
    return int(value)


def parse_multi_cursor(value: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    if value is None:
        return out
    for part in value.split(","):
        m = _CURSOR_PART.match(part.strip())
        if not m:
            raise CursorError(f"Last-Event-ID / after must look like 'runA:12,runB:7' (got {value[:60]!r}).")
        out[m.group(1)] = int(m.group(2))
    return out


def format_multi_cursor(cursors: dict[str, int]) -> str:
    return ",".join(f"{r}:{s}" for r, s in cursors.items())


async def stream_runs(
    hub: FeedHub, store: Store, runs: list[RunRow], cursors: dict[str, int], multiplexed: bool
) -> AsyncIterator[bytes]:
    """Yield SSE frames for `runs` (store rows) from each run's cursor until each run has ended."""
    channels: dict[str, Channel] = {}
    try:
        for run in runs:
            channels[run["id"]] = await hub.acquire(
                run["id"], run["last_seq"], run["status"] not in ACTIVE_STATUSES
            )
        yield f"retry: {RETRY_MS}\r\n\r\n".encode()
        active = [r["id"] for r in runs]
        while active:
            wakeups = [channels[r].changed for r in active]  # taken first: no lost wake-up
            progressed = False
            for rid in list(active):
                ch = channels[rid]
                batch: list[Frame] | None = ch.since(cursors[rid])
                from_store = batch is None
                if batch is None:  # behind the in-memory window: read the store
                    rows = await anyio.to_thread.run_sync(store.events_after, rid, cursors[rid], 1000)
                    batch = frames_filling_gaps(rid, cursors[rid], rows)
                for frame in batch:
                    cursors[rid] = frame.seq
                    if multiplexed:
                        yield (
                            f"id: {format_multi_cursor(cursors)}\r\nevent: {frame.kind}\r\n"
                            f"data: {frame.data}\r\n\r\n"
                        ).encode()
                    else:
                        yield frame.sse
                    if frame.terminal:
                        active.remove(rid)
                        break
                if batch:
                    progressed = True
                elif ch.done and (from_store or cursors[rid] >= ch.last):
                    active.remove(rid)  # ended (or deleted) with nothing left after this cursor
            if progressed or not active:
                continue
            if len(wakeups) == 1:  # the common case: no extra task per client per wake-up
                try:
                    async with asyncio.timeout(5.0):
                        await wakeups[0].wait()
                except TimeoutError:
                    pass
                continue
            waiters = [asyncio.ensure_future(w.wait()) for w in wakeups]
            try:
                await asyncio.wait(waiters, timeout=5.0, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
    finally:
        for ch in channels.values():
            hub.release(ch)
