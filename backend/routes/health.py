"""GET /api/health: is the store reachable, is the broker, are `normlab up`'s workers alive, is there room
for checkpoints."""

from __future__ import annotations

import os
import shutil
from typing import Any

import anyio
from fastapi import APIRouter, Request

from backend.deps import SettingsDep, StoreDep
from normlab.settings import Settings

router = APIRouter(prefix="/api", tags=["health"])
# Health's own threads: with every shared worker thread busy (streams replaying history, slow reads) a
# health check must not queue behind them.
_LIMITER: anyio.CapacityLimiter | None = None
# Below this a checkpoint of the largest model a server allows (5 M parameters with Adam's two moments,
# ≈ 60 MB) may not fit.
CHECKPOINT_MIN_FREE_BYTES = 64 * 2**20


def _limiter() -> anyio.CapacityLimiter:
    global _LIMITER
    if _LIMITER is None:  # made inside the event loop
        _LIMITER = anyio.CapacityLimiter(4)
    return _LIMITER


@router.get("/health")
async def health(request: Request, settings: SettingsDep, store: StoreDep) -> dict[str, Any]:
    """`status` is "ok", or "degraded" with `problems` saying what cannot work (runs would wait)."""
    # a dead database answers 503 via the error handler
    await anyio.to_thread.run_sync(store.ping, limiter=_limiter())
    problems = []
    broker_ok = await anyio.to_thread.run_sync(broker_reachable, settings, limiter=_limiter())
    if not broker_ok:
        problems.append("the broker cannot be reached: new runs cannot be queued")
    workers_of = getattr(request.app.state, "workers", None)  # set by `normlab up`
    workers = workers_of() if workers_of is not None else None
    if workers is not None and workers["configured"] and not workers["alive"]:
        problems.append("no worker is alive (they are being started again): queued runs wait")
    free = await anyio.to_thread.run_sync(checkpoint_free_bytes, settings, limiter=_limiter())
    if free is not None and free < CHECKPOINT_MIN_FREE_BYTES:
        problems.append(
            f"the checkpoint folder's disk is full ({free // 2**20} MiB free): runs train on without "
            "checkpoints, so they cannot be forked or resumed"
        )
    return {
        "status": "degraded" if problems else "ok",
        "checkpoint_free_bytes": free,
        "database": "postgresql" if not store.is_sqlite else "sqlite",
        "feed": "redis" if settings.uses_redis_feed else "embedded",
        "broker": "redis" if settings.broker_url else "filesystem",
        "broker_reachable": broker_ok,
        "workers": workers,
        "problems": problems,
        "auth": settings.auth,
    }


def checkpoint_free_bytes(settings: Settings) -> int | None:
    """Free bytes on the disk that holds the checkpoints (None when it cannot be looked at)."""
    where = settings.checkpoint_root
    while not where.exists() and where != where.parent:  # made on the first checkpoint
        where = where.parent
    try:
        return shutil.disk_usage(where).free
    except OSError:
        return None


def broker_reachable(settings: Settings) -> bool:
    if not settings.broker_url:
        folder = settings.data_dir / "queue" / "messages"  # made on the first run sent
        where = folder if folder.exists() else settings.data_dir
        return where.is_dir() and os.access(where, os.W_OK)
    if settings.broker_url.startswith(("redis://", "rediss://", "unix://")):
        import redis

        client = redis.Redis.from_url(settings.broker_url, socket_timeout=1, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()
    return True  # a broker this cannot look into
