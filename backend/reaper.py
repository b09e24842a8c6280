"""The reaper: a running run whose worker stopped sending heartbeats becomes `lost` (with a terminal
status event, so live viewers' streams end) instead of `running` forever."""

from __future__ import annotations

import asyncio
import logging
import time

import anyio

from normlab.events import RunStatus
from normlab.store import Store

log = logging.getLogger(__name__)

LOST_MESSAGE = ("The worker stopped sending heartbeats (it was killed or crashed) — the events stored "
                "before that are kept. Resubmit the run's spec to train it again.")


def reap_once(store: Store, lost_after_s: float, publish=None) -> list[str]:
    """Mark every stale running run lost; return their ids."""
    lost = []
    for run_id in store.stale_runs(time.time() - lost_after_s):
        row = store.finish_with_status(run_id, RunStatus.LOST, LOST_MESSAGE, only_from=(RunStatus.RUNNING,))
        if row is not None:
            lost.append(run_id)
            log.warning("run %s is lost (no heartbeat for %.0f s)", run_id, lost_after_s)
            if publish is not None:
                publish(run_id, [row])
    return lost


async def reaper_loop(store: Store, lost_after_s: float, publish=None) -> None:
    period = max(0.2, min(2.0, lost_after_s / 4))
    while True:
        try:
            await anyio.to_thread.run_sync(reap_once, store, lost_after_s, publish)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database may be briefly away; try again next period
            log.warning("reaper: %s", exc)
        await asyncio.sleep(period)
