"""Queued runs survive a Redis restart: the broker's queue lives in Redis, and a Redis without
persistence comes back empty. A sentinel key marks "this Redis still holds our queue"; when it is gone,
every run the store still calls `queued` is sent to the queue again, oldest first.

Sending a run twice is harmless: a worker trains a run only if it can claim it (queued -> running,
atomically in the store); a second copy finds it running or finished and is skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from sqlalchemy import select

from backend.background import BoundedCalls
from normlab.queue import enqueue_run, waiting_messages
from normlab.settings import Settings
from normlab_client.events import RunStatus

if TYPE_CHECKING:
    import redis
from normlab.store import Store
from normlab.store.schema import runs

log = logging.getLogger(__name__)
PERIOD_S = 1.0


def sentinel_key(settings: Settings) -> str:
    return f"{settings.queue}:broker-epoch"


def queued_ids(store: Store) -> list[str]:
    """Ids of queued runs, oldest first (the order they were submitted)."""
    with store.engine.connect() as conn:
        return list(
            conn.execute(
                select(runs.c.id).where(runs.c.status == RunStatus.QUEUED).order_by(runs.c.created_at)
            ).scalars()
        )


def requeue_if_broker_was_reset(store: Store, settings: Settings, client: redis.Redis) -> list[str]:
    """If the sentinel is missing (a new or emptied Redis), set it and re-send every queued run."""
    if not client.set(sentinel_key(settings), str(time.time()), nx=True):
        return []

    ids = queued_ids(store)
    for run_id in ids:
        enqueue_run(settings, run_id)
    if ids:
        log.warning("the broker's queue was empty (Redis restarted?): re-sent %d queued run(s)", len(ids))
    return ids


async def broker_watch_loop(store: Store, settings: Settings, call_bound_s: float = 60.0) -> None:
    """Run in the API: check the sentinel every PERIOD_S (only with a Redis broker); each check runs in
    the loop's own thread and is given up after `call_bound_s`. Run it under `supervise`."""
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        return
    import redis

    client = redis.Redis.from_url(settings.broker_url, socket_timeout=5, socket_connect_timeout=2)
    call = BoundedCalls(call_bound_s, threads=1)
    try:
        while True:
            try:
                await call(requeue_if_broker_was_reset, store, settings, client)
            except Exception as exc:  # Redis or the database is away: look again next period
                log.debug("broker watch: %s", exc)
            await asyncio.sleep(PERIOD_S)
    finally:
        client.close()


# Queued runs outnumbering the waiting messages for this long have lost a message to a worker that never
# claimed a run with it (a live one claims within a second or two): that worker died holding it.
MISSING_GRACE_S = 5.0
ORPHAN_PERIOD_S = 2.0


class OrphanWatch:
    """Re-sends queued runs that no waiting message will train any more — a message taken by a worker
    that died before claiming (a prefetched message in Redis's unacked hash, a file the file queue
    already handed out), or lost with an API that crashed between storing and sending. Either broker,
    and at API start (a restart after a crash re-sends what nobody holds). A copy too many is skipped by
    the claim.

    Messages are counted, not matched by name: a worker trains the first queued run in the fair order
    whichever run its message names (interactive runs overtake a preset's, groups take turns), so a
    queued run whose own message was spent on another run is still trained by that run's message. Only
    when fewer messages wait than runs are queued has one gone missing."""

    def __init__(self, store: Store, settings: Settings, grace_s: float = MISSING_GRACE_S):
        self.store, self.settings, self.grace_s = store, settings, grace_s
        self.missing_since: dict[str, float] = {}

    def check(self, now: float | None = None) -> list[str]:
        """One look: re-send what has been short of a message for grace_s; return the ids re-sent."""
        now = time.monotonic() if now is None else now
        queued = queued_ids(self.store)
        if not queued:
            self.missing_since.clear()
            return []
        waiting = waiting_messages(self.settings)
        if waiting is None:  # a broker this cannot look into
            return []
        # Read the store again: a run claimed while the broker was read is no longer queued.
        still = set(queued_ids(self.store))
        queued = [r for r in queued if r in still]
        short = len(queued) - len(waiting)
        # The runs no message names are the ones re-sent when messages are short (newest last).
        unnamed = [r for r in queued if r not in set(waiting)]
        self.missing_since = {r: self.missing_since.get(r, now) for r in unnamed} if short > 0 else {}
        due = [r for r in unnamed if now - self.missing_since.get(r, now) >= self.grace_s]
        resent = due[: max(short, 0)]
        for run_id in resent:
            enqueue_run(self.settings, run_id)
            self.missing_since[run_id] = now  # give the new message the same grace
        if resent:
            log.warning(
                "re-sent %d queued run(s): %d queued, %d message(s) waiting (a worker died holding one?): %s",
                len(resent),
                len(queued),
                len(waiting),
                ", ".join(resent),
            )
        return resent


async def orphan_watch_loop(store: Store, settings: Settings, call_bound_s: float = 60.0) -> None:
    """Run in the API: OrphanWatch.check every ORPHAN_PERIOD_S, in the loop's own thread, given up after
    `call_bound_s`. Run it under `supervise`."""
    watch = OrphanWatch(store, settings)
    call = BoundedCalls(call_bound_s, threads=1)
    while True:
        try:
            await call(watch.check)
        except Exception as exc:  # the broker or the database is away: look again next period
            log.debug("orphan watch: %s", exc)
        await asyncio.sleep(ORPHAN_PERIOD_S)
