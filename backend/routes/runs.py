"""Runs: submit, search, read, label (name, tags, note), metrics (downsampled), cancel, export (raw),
delete."""

from __future__ import annotations

import logging
import re
from datetime import UTC, date, datetime
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BeforeValidator

from backend.auth import require_owner
from backend.deps import RUN_ID_PATTERN, SettingsDep, StoreDep, UserDep, get_run_or_404
from backend.metrics import export_csv, export_json, run_metrics
from backend.routes.fork import delete_checkpoints
from backend.runs_common import UnreadableSpec, create_and_enqueue, run_public
from normlab.queue import drop_message
from normlab.run_labels import TAG_PATTERN, RunLabels
from normlab.store import lineage
from normlab.store.labels import RunQuery
from normlab.store.rollup import SCALAR_NAMES
from normlab_client.api_models import (
    ErrorDetail,
    MetricsPublic,
    RunCreated,
    RunList,
    RunPublic,
    UnreadableRun,
)
from normlab_client.events import RunStatus
from normlab_client.spec import NormName, RunSpec, TaskName

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/runs", tags=["runs"])
ISO_WHEN = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?", re.I)


def _iso(value: Any) -> Any:
    # pydantic would also take epoch numbers, which the documented (date / date-time) schema does not.
    if not (isinstance(value, str) and ISO_WHEN.fullmatch(value)):
        raise ValueError("give an ISO 8601 date or time, e.g. 2026-05-28 or 2026-05-28T12:00:00Z")
    return value


When = Annotated[datetime | date, BeforeValidator(_iso)]
NAMES_PATTERN = rf"^({'|'.join(SCALAR_NAMES)})(,({'|'.join(SCALAR_NAMES)}))*$"  # documented, checked below
OWNER_PATTERN = r"^[^\x00-\x1f\x7f]+$"  # no NUL or control characters: never sent to the database
ERRORS: dict[int | str, dict[str, Any]] = {404: {"model": ErrorDetail}, 422: {"model": ErrorDetail}}


@router.post(
    "",
    status_code=201,
    response_model=RunCreated,
    responses={**ERRORS, 429: {"model": ErrorDetail}, 503: {"model": ErrorDetail}},
)
def submit_run(spec: RunSpec, store: StoreDep, settings: SettingsDep, user: UserDep) -> RunCreated:
    """Queue one run. Invalid specs get 422 with the spec's messages per field."""
    [run_id] = create_and_enqueue(store, settings, [spec], user)
    return RunCreated(id=run_id, status=RunStatus.QUEUED)


@router.get("", response_model=RunList)
def list_runs(
    store: StoreDep,
    task: TaskName | None = None,
    norm: NormName | None = None,
    status: RunStatus | None = None,
    group: str | None = Query(None, pattern=RUN_ID_PATTERN, description="A sweep's group_id."),
    owner: str | None = Query(
        None, max_length=128, pattern=OWNER_PATTERN, description="A user name (runs submitted with auth on)."
    ),
    q: str | None = Query(
        None,
        max_length=200,
        pattern=OWNER_PATTERN,
        description="Text in the run's id, name, note, owner, task or normalizer (any case).",
    ),
    tag: str | None = Query(None, pattern=TAG_PATTERN, description="Runs with this tag."),
    created_after: When | None = Query(
        None, description="Created at or after (ISO 8601 date or time; UTC unless it says)."
    ),
    created_before: When | None = Query(None, description="Created before (ISO 8601, UTC unless given)."),
    offset: int = Query(0, ge=0, le=10**9),
    limit: int = Query(50, ge=1, le=500),
) -> RunList:
    """Runs matching every filter given, newest first; a run whose stored spec cannot be read is named
    in `unreadable` instead of `items`."""
    query = RunQuery(
        text=q,
        tag=tag,
        owner=owner,
        task=task,
        norm=norm,
        status=status,
        group=group,
        created_after=_epoch(created_after),
        created_before=_epoch(created_before),
    )
    rows, total = store.search_runs(query, offset=offset, limit=limit)
    tags = store.tags_of([r["id"] for r in rows])
    queue = store.queue_view() if any(r["status"] == "queued" for r in rows) else None
    items, unreadable = [], []
    for r in rows:  # one damaged run must not take the list down for everyone
        try:
            items.append(run_public(store, r, tags.get(r["id"], []), queue))
        except UnreadableSpec as exc:
            unreadable.append(UnreadableRun(id=r["id"], detail=exc.message))
    return RunList(items=items, total=total, offset=offset, limit=limit, unreadable=unreadable)


def _epoch(when: date | datetime | None) -> float | None:
    if when is None:
        return None
    if not isinstance(when, datetime):  # a date: its midnight, UTC
        when = datetime(when.year, when.month, when.day)
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


@router.patch("/{run_id}", response_model=RunPublic, responses={**ERRORS, 403: {"model": ErrorDetail}})
def label_run(run_id: str, labels: RunLabels, request: Request, store: StoreDep, user: UserDep) -> RunPublic:
    """Name, tag or annotate a run (its owner or an admin): only the fields sent change."""
    run = get_run_or_404(store, run_id)
    require_owner(request, run, "edit")
    sent = labels.model_dump(exclude_unset=True)
    if "tags" in sent and sent["tags"] is None:  # null: no tags
        sent["tags"] = []
    store.set_labels(run["id"], **sent)
    return run_public(store, get_run_or_404(store, run_id))


@router.get("/{run_id}", response_model=RunPublic, responses=ERRORS)
def get_run(run_id: str, store: StoreDep) -> RunPublic:
    return run_public(store, get_run_or_404(store, run_id))


@router.get("/{run_id}/metrics", response_model=MetricsPublic, responses=ERRORS)
def metrics(
    run_id: str,
    store: StoreDep,
    names: str | None = Query(
        None,
        description="Comma-separated metric names; all if absent.",
        json_schema_extra={"pattern": NAMES_PATTERN},
    ),
    max_points: int = Query(2000, ge=10, le=100_000),
) -> JSONResponse:
    """Each metric's history; past max_points it comes in min/max buckets (spikes survive)."""
    run = get_run_or_404(store, run_id)
    wanted = names.split(",") if names is not None else None
    unknown = [n for n in wanted or [] if n not in SCALAR_NAMES]
    if unknown or wanted == [""]:
        raise HTTPException(
            422,
            {
                "detail": f"Unknown metric(s) {', '.join(map(repr, unknown))}; choose from "
                f"{', '.join(SCALAR_NAMES)}.",
                "fields": {"names": "unknown"},
            },
        )
    # Built to the MetricsPublic shape by run_metrics; sent as is (re-validating ~40k floats costs more
    # than the query).
    return JSONResponse(run_metrics(store, run, wanted, max_points))


@router.post("/{run_id}/cancel", response_model=RunPublic, responses=ERRORS)
def cancel(run_id: str, request: Request, store: StoreDep, user: UserDep) -> RunPublic:
    """Cancel: a queued run ends at once; a running one stops within about a second (cooperatively).
    Cancelling a finished run changes nothing."""
    require_owner(request, get_run_or_404(store, run_id), "cancel")
    _status, event = store.request_cancel(run_id)
    if event is not None:
        request.app.state.publish(run_id, [event])
        try:  # a queued run's message would otherwise wait in the broker for nothing
            drop_message(request.app.state.settings, run_id)
        except Exception as exc:  # the worker drops it instead when it comes (workers.jobs)
            log.warning("run %s: could not remove its queued message (%s)", run_id, exc)
    return run_public(store, get_run_or_404(store, run_id))


EXPORT_CONTENT = {
    "text/csv": {"schema": {"type": "string"}},
    "application/json": {"schema": {"type": "object"}},
}


@router.get(
    "/{run_id}/export",
    responses={**ERRORS, 200: {"content": EXPORT_CONTENT, "description": "csv or json, as asked"}},
)
def export(run_id: str, store: StoreDep, format: Literal["csv", "json"] = "csv") -> StreamingResponse:
    """The raw history (never downsampled): csv = one row per scalars event; json = the run and every
    event."""
    run = get_run_or_404(store, run_id)
    name = f"normlab-{run['id']}.{format}"  # the id came from the store: no path tricks possible
    headers = {"Content-Disposition": f'attachment; filename="{name}"'}
    if format == "csv":
        return StreamingResponse(export_csv(store, run["id"]), media_type="text/csv", headers=headers)
    public = run_public(store, run).model_dump_json()
    return StreamingResponse(
        export_json(store, run["id"], public), media_type="application/json", headers=headers
    )


@router.delete("/{run_id}", status_code=204, responses={**ERRORS, 409: {"model": ErrorDetail}})
async def delete_run(
    run_id: str,
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    user: UserDep,
    with_children: bool = Query(
        False, description="Also delete the run's queued forks, which start from its checkpoints."
    ),
) -> None:
    """Delete a run and its history. A running run must be cancelled first (409); so must a run whose
    forks are queued or running (they need its checkpoints: 409 naming them), unless `with_children`
    deletes its queued forks with it."""
    run = get_run_or_404(store, run_id)
    require_owner(request, run, "delete")
    if run["status"] == RunStatus.RUNNING:
        raise HTTPException(
            409,
            f"This run is still training; cancel it first (POST /api/runs/{run_id}/cancel), then delete it.",
        )
    children = await anyio.to_thread.run_sync(lineage.active_children, store, run["id"])
    running = [c["id"] for c in children if c["status"] == RunStatus.RUNNING]
    if children and (not with_children or running):
        raise HTTPException(409, children_need_it(run["id"], children, with_children))
    for child in children:  # queued: none has started from the checkpoint yet
        require_owner(request, get_run_or_404(store, child["id"]), "delete")
    for child in children:
        store.request_cancel(child["id"])
        await anyio.to_thread.run_sync(store.delete_run, child["id"])
        await anyio.to_thread.run_sync(delete_checkpoints, settings, store, child["id"])
    await anyio.to_thread.run_sync(store.delete_run, run["id"])
    await anyio.to_thread.run_sync(delete_checkpoints, settings, store, run["id"])


def children_need_it(run_id: str, children: list[dict[str, Any]], with_children: bool) -> str:
    """Why a run with queued or running forks is not deleted, and what to do."""
    named = ", ".join(f"{c['id']} ({c['status']})" for c in children)
    if with_children:
        return (
            f"Run {run_id}'s forks {named} are training from its checkpoints; cancel the running ones "
            "first (POST /api/runs/{id}/cancel), then delete it."
        )
    return (
        f"Run {run_id} has forks that start from its checkpoints and have not finished: {named}. "
        f"Cancel them first, or delete them with it (DELETE /api/runs/{run_id}?with_children=true)."
    )
