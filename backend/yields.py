"""Batch work yields to interactive runs: while an interactive run (the Lab, POST /api/runs, a fork, a
resume) waits and every worker holds batch work (a preset's or a sweep's runs), the youngest batch run
is asked to yield (normlab.fair_queue.to_yield). Its worker checkpoints it at its next reported step
and puts it back in the queue (workers/jobs.py), takes the interactive run, and any free worker later
continues the batch run from that checkpoint as the same run (bit for bit on the CPU)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from backend.background import BoundedCalls
from normlab import fair_queue
from normlab.store import Store, lineage

log = logging.getLogger(__name__)

PERIOD_S = 0.25
PATIENCE_S = 1.0  # an interactive run queued this long found no free worker (when their number is unknown)


def ask_yields(store: Store, asked: set[str], workers: int | None = None) -> list[str]:
    """Ask the batch runs `to_yield` names to yield (once each: `asked` keeps them); returns them.
    `workers`: how many workers serve the queue, when known (`normlab up` knows): with every one of them
    on batch work the interactive run is served at once, without PATIENCE_S. The runs of a group an
    admin marked non-preemptible are never asked."""
    queued, running = store.queue_rows()
    asked &= {r["id"] for r in running}  # the ones that yielded (or ended) are done with
    if not any(fair_queue.run_class(r) == fair_queue.INTERACTIVE for r in queued):
        return []  # nothing waits that a yield would serve
    pinned = store.pinned_groups({r["group_id"] for r in running if r.get("group_id")})
    ids = fair_queue.to_yield(queued, running, time.time(), PATIENCE_S, asked, workers=workers, pinned=pinned)
    for run_id in ids:
        lineage.ask(store, run_id, "yield", {})
        asked.add(run_id)
        log.info("run %s asked to yield its worker to an interactive run", run_id)
    return ids


async def yield_loop(
    store: Store, call_bound_s: float = 60.0, workers: Callable[[], int | None] = lambda: None
) -> None:
    """Run in the API: `ask_yields` every PERIOD_S in the loop's own thread. Run it under `supervise`.
    `workers()`: how many workers are alive now, None when unknown."""
    call = BoundedCalls(call_bound_s, threads=1)
    asked: set[str] = set()
    while True:
        try:
            await call(ask_yields, store, asked, workers())
        except Exception as exc:  # the database is away: look again next period
            log.debug("yield watch: %s", exc)
        await asyncio.sleep(PERIOD_S)
