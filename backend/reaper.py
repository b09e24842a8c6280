"""The reaper: a running run whose worker stopped sending heartbeats becomes `lost` (with a terminal
status event, so live viewers' streams end) instead of `running` forever."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from backend.background import BoundedCalls
from normlab.store import EventRow, Store
from normlab.store.deadline import held_up
from normlab_client.events import RunStatus

# How the reaper puts the terminal events it writes on the live feed: publish(run_id, rows).
Publish = Callable[[str, list[EventRow]], object]

log = logging.getLogger(__name__)

LOST_MESSAGE = (
    "The worker stopped sending heartbeats (it was killed or crashed) — the events stored "
    "before that are kept. Resume the run to continue it from its latest checkpoint, or resubmit "
    "its spec to train it again from the start."
)


def reap_once(store: Store, lost_after_s: float, publish: Publish | None = None) -> list[str]:
    """Mark every stale running run lost; return their ids."""
    return [
        run_id
        for run_id in store.stale_runs(time.time() - lost_after_s)
        if mark_lost(store, run_id, lost_after_s, publish)
    ]


def mark_lost(store: Store, run_id: str, lost_after_s: float, publish: Publish | None = None) -> bool:
    """Mark one stale run lost (False if it is no longer running) and put its last event on the feed."""
    row = store.finish_with_status(
        run_id,
        RunStatus.LOST,
        LOST_MESSAGE,
        only_from=(RunStatus.RUNNING,),
        stale_before=time.time() - lost_after_s,  # a heartbeat that came meanwhile keeps it running
    )
    if row is None:
        return False
    log.warning("run %s is lost (no heartbeat for %.1f s)", run_id, lost_after_s)
    if publish is not None:
        publish(run_id, [row])
    return True


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
    store: Store,
    lost_after_s: float,
    publish: Publish | None = None,
    heartbeat_s: float = 2.0,
    call_bound_s: float = 60.0,
) -> None:
    """Every `period`, mark stale running runs lost. While the database is away the workers' heartbeats
    cannot reach it either: from the moment it answers again, they get a whole staleness window before
    any run is called lost (counted from the first answer, not the last failure, so a worker whose
    reconnect comes a little after the API's is not called lost). A look that took longer than the
    store's deadline counts as such an absence too (it answered only after a while), and a run is
    marked lost only if its heartbeat is still stale at that moment (one statement). Each store call
    runs in the reaper's own threads and is given up after `call_bound_s` (backend/background.py); a
    call that fails or is given up counts as the database being away. Run it under `supervise`."""
    period, stale_s = reaper_timing(lost_after_s, heartbeat_s)
    call = BoundedCalls(call_bound_s)
    slow_s = max(store.timeout_s or 0.0, period)  # a call slower than this met a database that was away
    quiet_until, away = 0.0, False
    while True:
        try:
            if away or time.monotonic() < quiet_until:  # only look whether the database answers
                await call(store.ping)
                if away:
                    away, quiet_until = False, time.monotonic() + period + stale_s
            else:
                began = time.monotonic()
                stale = await call(store.stale_runs, time.time() - stale_s)
                if time.monotonic() - began > slow_s:
                    # it answered only after a while: the workers' heartbeats could not get through
                    # meanwhile either, so they get a whole window from now, as after a failed call
                    log.warning("reaper: the database took %.1f s to answer", time.monotonic() - began)
                    stale, quiet_until = [], time.monotonic() + period + stale_s
                for run_id in stale:
                    await call(mark_lost, store, run_id, stale_s, publish)
        except Exception as exc:  # the database is away, or a call was held up or given up
            log.warning("reaper: %s", str(getattr(exc, "orig", None) or exc)[:200])
            if held_up(exc):  # it answers: a write waited on rows a cut-off session holds
                await call(store.after_held_up, exc)
            else:
                away = True
        await asyncio.sleep(period)
