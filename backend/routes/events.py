"""Live events over SSE: one run (`id:` = seq) or several multiplexed (`id:` = "runA:12,runB:7").

Resume with the `Last-Event-ID` header (browsers send it on reconnect) or `?after=`. A stream ends after
its runs' terminal status events; reconnecting to a finished stream answers 204 (which tells a browser's
EventSource to stop reconnecting).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter, Header, HTTPException, Query, Request, Response
from sse_starlette import EventSourceResponse

from backend.deps import HubDep, SettingsDep, StoreDep, get_run_or_404
from backend.sse import CursorError, parse_multi_cursor, parse_single_cursor, stream_runs
from backend.stream_slots import StreamSlots
from normlab.store import RunRow
from normlab_client.api_models import ErrorDetail
from normlab_client.events import TERMINAL_STATUSES

router = APIRouter(prefix="/api", tags=["events"])
ERRORS: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
        "description": "Server-Sent Events until the runs' terminal status events",
    },
    204: {"description": "The runs have ended and nothing is left after the cursor"},
    400: {"model": ErrorDetail},
    404: {"model": ErrorDetail},
    429: {"model": ErrorDetail, "description": "Too many streams open (this client's, or the server's)"},
}
# Documented (clients learn the forms); a value that does not match is answered 400 with what to send.
SINGLE = {"pattern": r"^[0-9]{1,12}$"}
MULTI = {"pattern": r"^[0-9a-f]{1,32}:[0-9]{1,12}(,[0-9a-f]{1,32}:[0-9]{1,12})*$"}
# An empty Last-Event-ID header means "from the start" (as if absent); an empty ?after= is refused.
SINGLE_HEADER = {"pattern": r"^([0-9]{1,12})?$"}
MULTI_HEADER = {"pattern": r"^([0-9a-f]{1,32}:[0-9]{1,12}(,[0-9a-f]{1,32}:[0-9]{1,12})*)?$"}
RUN_IDS = {"pattern": r"^[0-9A-Za-z_-]{1,32}(,[0-9A-Za-z_-]{1,32}){0,49}$"}
MAX_RUNS_PER_STREAM = 50
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _held(request: Request, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The stream, holding one of its client's slots (429 when none is free: backend/stream_slots.py)."""
    client = request.client.host if request.client else "unknown"
    slots: StreamSlots = request.app.state.stream_slots
    return slots.hold(client, stream)


def _finished(run: RunRow, cursor: int) -> bool:
    return run["status"] in TERMINAL_STATUSES and cursor >= run["last_seq"]


@router.get("/runs/{run_id}/events", responses=ERRORS)
async def run_events(
    run_id: str,
    request: Request,
    store: StoreDep,
    hub: HubDep,
    settings: SettingsDep,
    after: str | None = Query(None, json_schema_extra=SINGLE),
    last_event_id: str | None = Header(None, json_schema_extra=SINGLE_HEADER),
) -> Response:
    """SSE of one run: its history after the cursor, then live events, until its terminal status."""
    try:
        given = parse_single_cursor(after)  # checked even when the header wins: bad input is never ignored
        cursor = parse_single_cursor(last_event_id) if last_event_id else given
    except CursorError as exc:
        raise HTTPException(400, str(exc)) from exc
    run = await anyio.to_thread.run_sync(get_run_or_404, store, run_id)
    if _finished(run, cursor):
        return Response(status_code=204)
    return EventSourceResponse(
        _held(request, stream_runs(hub, store, [run], {run["id"]: cursor}, multiplexed=False)),
        ping=settings.sse_heartbeat_s,
        headers=SSE_HEADERS,
    )


@router.get("/events", responses=ERRORS)
async def multiplexed_events(
    request: Request,
    store: StoreDep,
    hub: HubDep,
    settings: SettingsDep,
    runs: str = Query(json_schema_extra=RUN_IDS),
    after: str | None = Query(None, json_schema_extra=MULTI),
    last_event_id: str | None = Header(None, json_schema_extra=MULTI_HEADER),
) -> Response:
    """One SSE stream for several runs (a browser tab): `event:` = kind, `data:` = Event JSON with its
    run_id, `id:` = the cursor of every run, so a reconnect resumes each where it was."""
    ids = list(dict.fromkeys(r.strip() for r in runs.split(",") if r.strip()))
    if not ids or len(ids) > MAX_RUNS_PER_STREAM:
        raise HTTPException(400, f"runs must list 1 to {MAX_RUNS_PER_STREAM} run ids, comma-separated.")
    try:
        given = parse_multi_cursor(after)
        cursors = parse_multi_cursor(last_event_id) if last_event_id else given
    except CursorError as exc:
        raise HTTPException(400, str(exc)) from exc
    rows = [await anyio.to_thread.run_sync(get_run_or_404, store, r) for r in ids]
    cursors = {r["id"]: cursors.get(r["id"], 0) for r in rows}
    live = [r for r in rows if not _finished(r, cursors[r["id"]])]
    if not live:
        return Response(status_code=204)
    return EventSourceResponse(
        _held(request, stream_runs(hub, store, live, cursors, multiplexed=True)),
        ping=settings.sse_heartbeat_s,
        headers=SSE_HEADERS,
    )
