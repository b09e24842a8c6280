"""GET /api/health: is the store reachable, which feed and broker this server uses."""

from __future__ import annotations

import anyio
from fastapi import APIRouter

from backend.deps import SettingsDep, StoreDep

router = APIRouter(prefix="/api", tags=["health"])


@router.get("/health")
async def health(settings: SettingsDep, store: StoreDep) -> dict:
    await anyio.to_thread.run_sync(store.ping)  # a dead database answers 503 via the error handler
    return {
        "status": "ok",
        "database": "postgresql" if not store.is_sqlite else "sqlite",
        "feed": "redis" if settings.uses_redis_feed else "embedded",
        "broker": "redis" if settings.broker_url else "filesystem",
        "auth": settings.auth,
    }
