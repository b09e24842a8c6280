"""Batch work yields to interactive runs: while an interactive run (the Lab, POST /api/runs, a fork, a
resume) waits and every worker holds batch work (a preset's or a sweep's runs), the youngest batch run
is asked to yield (normlab.fair_queue.to_yield). Its worker checkpoints it at its next reported step
and puts it back in the queue (workers/jobs.py), takes the interactive run, and any free worker later
continues the batch run from that checkpoint as the same run (bit for bit on the CPU)."""

from __future__ import annotations

import asyncio
import logging
import time

from backend.background import BoundedCalls
from normlab import fair_queue
from normlab.store import Store, lineage

log = logging.getLogger(__name__)

PERIOD_S = 0.25
PATIENCE_S = 1.0  # an interactive run queued this long found no free worker


def ask_yields(store: Store, asked: set[str]) -> list[str]:
    """Ask the batch runs `to_yield` names to yield (once each: `asked` keeps them); returns them."""
    queued, running = store.queue_rows()
    asked &= {r["id"] for r in running}  # the ones that yielded (or ended) are done with
    ids = fair_queue.to_yield(queued, running, time.time(), PATIENCE_S, asked)
    for run_id in ids:
        lineage.ask(store, run_id, "yield", {})
        asked.add(run_id)
        log.info("run %s asked to yield its worker to an interactive run", run_id)
    return ids


async def yield_loop(store: Store, call_bound_s: float = 60.0) -> None:
    """Run in the API: `ask_yields` every PERIOD_S in the loop's own thread. Run it under `supervise`."""
    call = BoundedCalls(call_bound_s, threads=1)
    asked: set[str] = set()
    while True:
        try:
            await call(ask_yields, store, asked)
        except Exception as exc:  # the database is away: look again next period
            log.debug("yield watch: %s", exc)
        await asyncio.sleep(PERIOD_S)
