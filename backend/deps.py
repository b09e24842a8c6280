"""FastAPI dependencies as typed aliases: the settings, the store, the live-feed hub, the caller."""

from __future__ import annotations

import re
from typing import Annotated, cast

from fastapi import Depends, HTTPException, Request

from backend.feed.hub import FeedHub
from normlab.settings import Settings
from normlab.store import RunRow, Store


def _settings(request: Request) -> Settings:
    return cast(Settings, request.app.state.settings)


def _store(request: Request) -> Store:
    return cast(Store, request.app.state.store)


def _hub(request: Request) -> FeedHub:
    return cast(FeedHub, request.app.state.hub)


def _current_user(request: Request) -> str | None:
    """Who is calling: None with auth off (the embedded default); else the token's user (set by
    backend.auth.guard, which every route runs first). Routes record it as the run's owner."""
    principal = getattr(request.state, "principal", None)
    return principal.name if principal is not None else None


# What a run id can be (new ones are 12 hex digits); anything else is answered 404 without a query, so
# a NUL byte or a control character never reaches the database (PostgreSQL refuses NUL in text).
RUN_ID_PATTERN = r"^[0-9A-Za-z_-]{1,32}$"
RUN_ID = re.compile(RUN_ID_PATTERN)


def get_run_or_404(store: Store, run_id: str) -> RunRow:
    run = store.get_run(run_id) if RUN_ID.fullmatch(run_id) else None
    if run is None:
        shown = run_id[:40].encode("ascii", "backslashreplace").decode()
        raise HTTPException(404, f"No run with id '{shown}'. List runs with GET /api/runs.")
    return run


SettingsDep = Annotated[Settings, Depends(_settings)]
StoreDep = Annotated[Store, Depends(_store)]
HubDep = Annotated[FeedHub, Depends(_hub)]
UserDep = Annotated[str | None, Depends(_current_user)]
