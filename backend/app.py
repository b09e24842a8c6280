"""`create_app(settings)`: the FastAPI application (API at /api, OpenAPI at /api/docs), optionally with
the Dash front end mounted at "/" on the same origin. Never imports torch."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse

from backend import auth, errors, resubmit
from backend.feed.hub import FeedHub
from backend.limits import BodyLimit
from backend.reaper import reaper_loop
from backend.requeue import broker_watch_loop
from backend.routes import ROUTERS
from backend.store import get_store
from normlab.settings import Settings, get_settings

log = logging.getLogger(__name__)

PLACEHOLDER = """<!doctype html><html><head><title>normlab</title></head><body>
<h1>normlab</h1><p>The API is running: <a href="/api/docs">/api/docs</a>. The pages are not installed
in this copy (frontend.app is missing).</p></body></html>"""


def create_app(settings: Settings | None = None, *, frontend: bool = False) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.hub = FeedHub(app.state.store, settings)
        reaper = asyncio.create_task(reaper_loop(app.state.store, settings.lost_after_s, app.state.publish,
                                                  settings.worker_heartbeat_s))
        requeuer = asyncio.create_task(broker_watch_loop(app.state.store, settings))  # Redis restarts
        try:
            yield
        finally:
            reaper.cancel()
            requeuer.cancel()
            await app.state.hub.close()

    app = FastAPI(title="normlab API", version="0.1.0", lifespan=lifespan, docs_url="/api/docs",
                  openapi_url="/api/openapi.json", redoc_url=None,
                  dependencies=[auth.GuardDep])  # tokens (NORMLAB_AUTH=tokens): who calls, 401s
    app.state.settings = settings
    app.state.store = get_store(settings)
    app.state.publish = _publisher(settings)
    # The compose form serves the front end from another origin; reads and writes are JSON only.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)  # 413 before any parsing
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])
    errors.install(app)
    for router in [*ROUTERS, auth.router, resubmit.router]:
        app.include_router(router)
    if frontend:
        _mount_frontend(app)
    return app


def _publisher(settings: Settings):
    """How the API puts the terminal events it writes itself (cancel, lost) on the live feed."""
    if not settings.uses_redis_feed:
        return lambda run_id, rows: None  # the embedded feed tails the store
    from backend.feed.redis_feed import RedisPublisher

    pub = RedisPublisher(settings)
    return pub.publish


def _mount_frontend(app: FastAPI) -> None:
    try:
        from frontend.app import create_app as create_dash
    except ImportError as exc:
        log.warning("front end not available (%s); serving a placeholder at /", exc)

        @app.get("/", include_in_schema=False)
        def placeholder() -> HTMLResponse:
            return HTMLResponse(PLACEHOLDER)
        return
    from backend.wsgi import WSGIMiddleware

    dash_app = create_dash(api_base="")
    app.mount("/", WSGIMiddleware(dash_app.server))
