"""POST /api/watched and /api/watched/{id}/events: a training loop of the user's own (normlab_client's
`watch()`) as a normlab run: created running, its events appended by the script, deduplicated by seq.

The script numbers its events 2, 3, … (1 is the run's `running` status, written here) and resends
what was not acknowledged after a cut: events at or below the run's last stored seq are dropped (sent
twice, stored once), the rest must continue it without a gap (409 names the last stored seq otherwise).
A terminal status event ends the run in the same transaction as its summary.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from backend.auth import require_owner
from backend.deps import SettingsDep, StoreDep, UserDep, get_run_or_404
from normlab.feed.writer import payload_text
from normlab.store import EventRow, Store, new_run_id
from normlab.store.rollup import RollupBuilder, bucket_rows
from normlab_client.api_models import ErrorDetail
from normlab_client.events import Event, RunStatus, check_payload
from normlab_client.spec import MAX_STEPS, WATCHED_TASK

router = APIRouter(prefix="/api/watched", tags=["watched"])
ERRORS: dict[int | str, dict[str, Any]] = {c: {"model": ErrorDetail} for c in (403, 404, 409, 422)}
MAX_BATCH = 500  # events per request: 500 small ones fit the default 64 KiB body limit
SOURCE_TAG = "watched"


class WatchedCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=120, description="The run's name in the lab.")
    script: str = Field("", max_length=300, description="The script that trains (shown as the source).")
    steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="Steps it expects to train, if known.")
    every: int = Field(10, ge=1, le=100_000, description="Steps between recorded statistics.")


class WatchedCreated(BaseModel):
    id: str
    last_seq: int


class WatchedEvents(BaseModel):
    model_config = ConfigDict(extra="forbid")

    events: list[Event] = Field(max_length=MAX_BATCH)


class WatchedAck(BaseModel):
    last_seq: int
    status: RunStatus


@router.post("", status_code=201, response_model=WatchedCreated, responses=ERRORS)
def create_watched(
    body: WatchedCreate, request: Request, store: StoreDep, user: UserDep, settings: SettingsDep
) -> WatchedCreated:
    """A running run for a script of the user's own (task 'watched', tagged 'watched'); its first event
    (seq 1) is its `running` status. Its steps: the script's, within this server's NORMLAB_MAX_STEPS (the
    run's x axis; a loop that trains longer still reports every step)."""
    if body.steps is not None and body.steps > settings.max_steps:
        raise HTTPException(
            422,
            {
                "detail": f"This server's runs have at most {settings.max_steps} steps (got {body.steps}); "
                "leave steps out if the loop trains longer.",
                "fields": {"steps": f"at most {settings.max_steps}"},
            },
        )
    run_id = new_run_id()
    steps = body.steps or settings.max_steps
    spec = {"task": WATCHED_TASK, "norm": "none", "steps": steps, "eval_every": body.every}
    store.create_runs([{"id": run_id, "spec": spec, "owner": user}])
    store.claim(run_id, worker_host=body.script or "watched script")
    note = f"source: watched — `{body.script or 'a script'}`, statistics every {body.every} steps"
    store.set_labels(run_id, name=body.name, note=note, tags=[SOURCE_TAG])
    row = EventRow(1, 0, "status", time.time(), payload_text({"status": "running", "message": None}))
    store.append_events(run_id, [row], [], 0)
    request.app.state.publish(run_id, [row])
    return WatchedCreated(id=run_id, last_seq=1)


@router.post("/{run_id}/events", response_model=WatchedAck, responses=ERRORS)
def append_watched(
    run_id: str, body: WatchedEvents, request: Request, store: StoreDep, user: UserDep
) -> WatchedAck:
    """Append the script's events (seq-ordered); those already stored are dropped. Answers the run's
    last stored seq and its status (a cancelled run answers 'cancelled': the script stops sending)."""
    run = get_run_or_404(store, run_id)
    require_owner(request, run, "append to")
    spec = json.loads(run["spec"])
    if spec.get("task") != WATCHED_TASK:
        raise HTTPException(422, f"Run {run_id} is trained by a worker, not a watched script.")
    with _lock(request, run_id):
        run = get_run_or_404(store, run_id)
        last = int(run["last_seq"])
        if run["status"] != RunStatus.RUNNING:
            return WatchedAck(last_seq=last, status=run["status"])
        new = [e for e in body.events if e.seq > last]
        if new and [e.seq for e in new] != list(range(last + 1, last + 1 + len(new))):
            raise HTTPException(
                409, f"Events must continue run {run_id}'s last stored seq {last} without a gap."
            )
        for e in new:
            try:
                check_payload(e.kind, e.payload)
            except ValidationError as exc:
                raise HTTPException(422, f"event {e.seq} ({e.kind}): {exc.errors()[0]['msg']}") from None
        _store_events(request, store, run_id, new)
        run = get_run_or_404(store, run_id)
        return WatchedAck(last_seq=int(run["last_seq"]), status=run["status"])


def _store_events(request: Request, store: Store, run_id: str, new: list[Event]) -> None:
    if not new:
        store.heartbeat(run_id)  # an empty batch: the script is alive, the reaper leaves the run be
        return
    rollup = _rollup(request, store, run_id)
    rows, buckets, scalars = [], [], 0
    finish: dict[str, Any] | None = None
    for e in new:
        row = EventRow(e.seq, e.step, e.kind, e.time, payload_text(e.payload))
        rows.append(row)
        if e.kind == "scalars":
            scalars += 1
            buckets += bucket_rows(rollup.add(e.seq, e.step, e.time, e.payload))
        if e.terminal:
            finish = _finish(e, store, run_id, new)
            break  # nothing after the end
    store.append_events(run_id, rows, buckets, scalars, finish)
    if finish is None:
        store.heartbeat(run_id)
    request.app.state.publish(run_id, rows)


def _finish(end: Event, store: Store, run_id: str, new: list[Event]) -> dict[str, Any]:
    status = str(end.payload["status"])
    last_scalars = next((e.payload for e in reversed(new) if e.kind == "scalars"), None)
    metrics = {k: v for k, v in (last_scalars or {}).items() if isinstance(v, float)}
    run = store.get_run(run_id)
    started = run["started_at"] if run is not None else None
    summary = {"metrics": metrics, "step": end.step, "wall_time": time.time() - (started or time.time())}
    return {
        "status": status,
        "finished_at": time.time(),
        "summary": json.dumps(summary),
        "error": end.payload.get("message") if status in (RunStatus.FAILED, RunStatus.LOST) else None,
    }


def _lock(request: Request, run_id: str) -> threading.Lock:
    """One request at a time per run (a script's retry may overlap the request it retries)."""
    state = request.app.state
    if not hasattr(state, "watched_locks"):
        state.watched_locks = {}
    lock: threading.Lock = state.watched_locks.setdefault(run_id, threading.Lock())
    return lock


def _rollup(request: Request, store: Store, run_id: str) -> RollupBuilder:
    """The run's open roll-up buckets: kept between requests, rebuilt from its stored scalars after a
    restart of the API (as a resumed worker does)."""
    state = request.app.state
    if not hasattr(state, "watched_rollups"):
        state.watched_rollups = {}
    builder: RollupBuilder | None = state.watched_rollups.get(run_id)
    if builder is None:
        builder = RollupBuilder()
        for row in store.iter_events(run_id, kind="scalars"):
            builder.add(row.seq, row.step, row.time, json.loads(row.payload))
        state.watched_rollups[run_id] = builder
    return builder
