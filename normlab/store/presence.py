"""Who is using a store right now, and what a store that was used during a restore can be left holding.

Each API process notes itself in the store's `cache` table every PERIOD_S (and removes the note when it
stops); a running run carries its worker's heartbeat. `normlab restore` refuses a store with either
unless forced, and a forced restore removes what the processes still running leave behind: rows of
runs the restored store does not have, and their checkpoint folders.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from sqlalchemy import delete, select

from normlab import checkpoints
from normlab.store.schema import cache, events, lineage, rollups, run_requests, run_tags, runs
from normlab.store.store import Store
from normlab_client.events import RunStatus

PREFIX = "presence:api:"
PERIOD_S = 5.0


def api_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def note_api(store: Store, name: str) -> None:
    store.cache_set(PREFIX + name, "")


def forget_api(store: Store, name: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(delete(cache).where(cache.c.key == PREFIX + name))


def in_use(store: Store, lost_after_s: float) -> list[str]:
    """What uses the store now: API processes that noted themselves lately, workers whose runs sent a
    heartbeat lately (one line each)."""
    now = time.time()
    with store.engine.connect() as conn:
        apis = conn.execute(
            select(cache.c.key).where(cache.c.key.startswith(PREFIX), cache.c.updated_at > now - 3 * PERIOD_S)
        ).scalars()
        out = [f"the API server {key.removeprefix(PREFIX)}" for key in apis]
        training = conn.execute(
            select(runs.c.id, runs.c.worker_host).where(
                runs.c.status == RunStatus.RUNNING, runs.c.heartbeat_at > now - lost_after_s
            )
        ).all()
    return out + [f"a worker ({host or 'unknown host'}) training run {rid}" for rid, host in training]


def remove_orphans(store: Store, checkpoint_root: Path) -> dict[str, int]:
    """Delete rows and checkpoint folders of runs the store does not have; how many of each."""
    known = select(runs.c.id)
    counts: dict[str, int] = {}
    with store.engine.begin() as conn:
        for name, table, column in (
            ("events", events, events.c.run_id),
            ("rollups", rollups, rollups.c.run_id),
            ("tags", run_tags, run_tags.c.run_id),
            ("requests", run_requests, run_requests.c.run_id),
            ("lineage", lineage, lineage.c.child_id),
        ):
            counts[name] = conn.execute(delete(table).where(column.notin_(known))).rowcount
        ids = set(conn.execute(known).scalars())
    folders = 0
    if Path(checkpoint_root).is_dir():
        for folder in Path(checkpoint_root).iterdir():
            if folder.is_dir() and folder.name not in ids:
                try:
                    checkpoints.delete_run(checkpoint_root, folder.name)
                except checkpoints.CheckpointError:
                    continue  # not a run's folder: not ours to delete
                folders += 1
    counts["checkpoint_folders"] = folders
    return counts
