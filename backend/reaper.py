"""The reaper: a running run whose worker stopped sending heartbeats becomes `lost` (with a terminal
status event, so live viewers' streams end) instead of `running` forever."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import anyio

from normlab.events import RunStatus
from normlab.store import EventRow, Store

# How the reaper puts the terminal events it writes on the live feed: publish(run_id, rows).
Publish = Callable[[str, list[EventRow]], object]

log = logging.getLogger(__name__)

LOST_MESSAGE = (
    "The worker stopped sending heartbeats (it was killed or crashed) — the events stored "
    "before that are kept. Resubmit the run's spec to train it again."
)


def reap_once(store: Store, lost_after_s: float, publish: Publish | None = None) -> list[str]:
    """Mark every stale running run lost; return their ids."""
    lost = []
    for run_id in store.stale_runs(time.time() - lost_after_s):
        row = store.finish_with_status(run_id, RunStatus.LOST, LOST_MESSAGE, only_from=(RunStatus.RUNNING,))
        if row is not None:
            lost.append(run_id)
            log.warning("run %s is lost (no heartbeat for %.1f s)", run_id, lost_after_s)
            if publish is not None:
                publish(run_id, [row])
    return lost


def reaper_timing(lost_after_s: float, heartbeat_s: float) -> tuple[float, float]:
    """(period, staleness): how often to look, and how old a last heartbeat must be to call its run lost,
    so that a worker that dies is reported within `lost_after_s` of its death. Its last heartbeat can be
    a heartbeat period (plus the watcher's 0.2 s poll) older than the death, and the reaper looks once a
    period: both come off. Never below 2 s (or lost_after_s if shorter) and two heartbeats: a busy
    worker's heartbeat thread can be held up that long (a run starting up, loading its data), and a live
    run must not be declared lost."""
    period = max(0.2, min(1.0, lost_after_s / 8))
    floor = max(2 * heartbeat_s, min(lost_after_s, 2.0))
    return period, max(floor, lost_after_s - heartbeat_s - 0.2 - 1.5 * period)


async def reaper_loop(
    store: Store, lost_after_s: float, publish: Publish | None = None, heartbeat_s: float = 2.0
) -> None:
    """Every `period`, mark stale running runs lost. While the database is away the workers' heartbeats
    cannot reach it either: from the moment it answers again, they get a whole staleness window before
    any run is called lost (counted from the first answer, not the last failure, so a worker whose
    reconnect comes a little after the API's is not called lost)."""
    period, stale_s = reaper_timing(lost_after_s, heartbeat_s)
    quiet_until, away = 0.0, False
    while True:
        try:
            if away or time.monotonic() < quiet_until:  # only look whether the database answers
                await anyio.to_thread.run_sync(store.ping)
                if away:
                    away, quiet_until = False, time.monotonic() + period + stale_s
            else:
                await anyio.to_thread.run_sync(reap_once, store, stale_s, publish)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database is away
            log.warning("reaper: %s", str(getattr(exc, "orig", None) or exc)[:200])
            away = True
        await asyncio.sleep(period)
