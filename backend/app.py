"""`create_app(settings)`: the FastAPI application (API at /api, OpenAPI at /api/docs). Never imports
torch, never imports the front end: `normlab up` mounts the pages at "/" (normlab/cli/serve.py)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware

from backend import auth, errors, openapi, resubmit
from backend.background import call_bound_s, presence_loop, supervise
from backend.feed.hub import FeedHub
from backend.limits import BodyLimit
from backend.reaper import Publish, reaper_loop
from backend.requeue import broker_watch_loop, orphan_watch_loop
from backend.routes import ROUTERS
from backend.stream_slots import StreamSlots
from backend.yields import yield_loop
from normlab.settings import Settings
from normlab.store import get_store
from normlab_client.norms import load_plugins

log = logging.getLogger(__name__)


def create_app(settings: Settings) -> FastAPI:
    load_plugins(settings.plugins)  # the normalizers it checks specs against (normlab_client.norms)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.hub = FeedHub(app.state.store, settings)
        store, bound_s = app.state.store, call_bound_s(settings.db_timeout_s, app.state.store.is_sqlite)
        loops = {
            "reaper": lambda: reaper_loop(
                store, settings.lost_after_s, app.state.publish, settings.worker_heartbeat_s, bound_s
            ),
            "broker watch": lambda: broker_watch_loop(store, settings, bound_s),  # Redis restarts
            "orphan watch": lambda: orphan_watch_loop(store, settings, bound_s),  # dead holders
            "presence": lambda: presence_loop(store, bound_s),  # a store in use: restore refuses it
            # batch work gives way to interactive runs; `normlab up` says how many workers it runs
            "yields": lambda: yield_loop(store, bound_s, functools.partial(_alive_workers, app)),
        }
        tasks = [asyncio.create_task(supervise(name, loop)) for name, loop in loops.items()]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await app.state.hub.close()

    app = FastAPI(
        title="normlab API",
        version="0.1.0",
        lifespan=lifespan,
        docs_url="/api/docs",
        openapi_url="/api/openapi.json",
        redoc_url=None,
        # tokens (NORMLAB_AUTH=tokens): who calls, 401s; one value per query parameter
        dependencies=[auth.GuardDep, Depends(openapi.no_repeated_query)],
    )
    app.state.settings = settings
    app.state.store = get_store(settings)
    app.state.publish = _publisher(settings)
    app.state.stream_slots = StreamSlots(settings.max_streams_per_client, settings.max_streams)
    # The compose form serves the front end from another origin; reads and writes are JSON only.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)  # 413 before any parsing
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])
    errors.install(app)
    openapi.install(app, settings)  # the document describes the answers actually given
    for router in [*ROUTERS, auth.router, resubmit.router]:
        app.include_router(router)
    return app


def _alive_workers(app: FastAPI) -> int | None:
    """The workers alive now, as `normlab up` reports them (app.state.workers); None when unknown."""
    workers = getattr(app.state, "workers", None)
    return None if workers is None else int(workers()["alive"])


def _publisher(settings: Settings) -> Publish:
    """How the API puts the terminal events it writes itself (cancel, lost) on the live feed."""
    if not settings.uses_redis_feed:
        return lambda run_id, rows: None  # the embedded feed tails the store
    from normlab.feed.redis_feed import RedisPublisher

    pub = RedisPublisher(settings)
    return pub.publish
