"""FastAPI dependencies as typed aliases: the settings, the store, the live-feed hub, the caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from backend.feed.hub import FeedHub
from normlab.settings import Settings
from normlab.store import Store


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def _store(request: Request) -> Store:
    return request.app.state.store


def _hub(request: Request) -> FeedHub:
    return request.app.state.hub


def _current_user(request: Request) -> str | None:
    """Who is calling: None with auth off (the embedded default); else the token's user (set by
    backend.auth.guard, which every route runs first). Routes record it as the run's owner."""
    principal = getattr(request.state, "principal", None)
    return principal.name if principal is not None else None


def get_run_or_404(store: Store, run_id: str) -> dict:
    run = store.get_run(run_id) if len(run_id) <= 32 else None
    if run is None:
        raise HTTPException(404, f"No run with id '{run_id[:40]}'. List runs with GET /api/runs.")
    return run


SettingsDep = Annotated[Settings, Depends(_settings)]
StoreDep = Annotated[Store, Depends(_store)]
HubDep = Annotated[FeedHub, Depends(_hub)]
UserDep = Annotated[str | None, Depends(_current_user)]
