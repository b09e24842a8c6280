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

import anyio
from sqlalchemy import select

from normlab.events import RunStatus
from normlab.queue import enqueue_run
from normlab.settings import Settings
from normlab.store import Store
from normlab.store.schema import runs

log = logging.getLogger(__name__)
PERIOD_S = 1.0


def sentinel_key(settings: Settings) -> str:
    return f"{settings.queue}:broker-epoch"


def queued_ids(store: Store) -> list[str]:
    """Ids of queued runs, oldest first (the order they were submitted)."""
    with store.engine.connect() as conn:
        return list(conn.execute(select(runs.c.id).where(runs.c.status == RunStatus.QUEUED)
                                 .order_by(runs.c.created_at)).scalars())


def requeue_if_broker_was_reset(store: Store, settings: Settings, client) -> list[str]:
    """If the sentinel is missing (a new or emptied Redis), set it and re-send every queued run."""
    if not client.set(sentinel_key(settings), str(time.time()), nx=True):
        return []

    ids = queued_ids(store)
    for run_id in ids:
        enqueue_run(settings, run_id)
    if ids:
        log.warning("the broker's queue was empty (Redis restarted?): re-sent %d queued run(s)", len(ids))
    return ids


async def broker_watch_loop(store: Store, settings: Settings) -> None:
    """Run in the API: check the sentinel every PERIOD_S (only with a Redis broker)."""
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        return
    import redis

    client = redis.Redis.from_url(settings.broker_url, socket_timeout=5, socket_connect_timeout=2)
    try:
        while True:
            try:
                await anyio.to_thread.run_sync(requeue_if_broker_was_reset, store, settings, client)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis or the database is away: look again next period
                log.debug("broker watch: %s", exc)
            await asyncio.sleep(PERIOD_S)
    finally:
        client.close()
