"""Forks and interventions: fork a run from a checkpoint with changes, resume a lost run, change a
running run's knobs, and read a run's lineage and checkpoints."""

from __future__ import annotations

import time
from typing import Any, Literal

import anyio
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from backend.deps import SettingsDep, StoreDep, UserDep, get_run_or_404
from backend.errors import validation_fields
from backend.runs_common import create_and_enqueue
from normlab import checkpoints
from normlab.fork import ForkRefused, child_spec
from normlab.queue import enqueue_run
from normlab.settings import Settings
from normlab.store import RunRow, Store, lineage
from normlab_client.api_models import ErrorDetail
from normlab_client.events import RunStatus
from normlab_client.spec import Intervention, RunSpec

router = APIRouter(prefix="/api/runs", tags=["fork"])
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorDetail} for code in (404, 409, 422, 429)}
NOW_WAIT_S = 15.0  # a running run checkpoints at its next step; one step of the largest run allowed


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: int | Literal["now"] = Field(description="Fork after the latest checkpoint at or before this step.")
    changes: dict[str, Any] = Field(default_factory=dict, description="RunSpec fields the child changes.")


class ForkCreated(BaseModel):
    id: str
    from_step: int
    status: RunStatus = RunStatus.QUEUED


class Resumed(BaseModel):
    id: str
    from_step: int = Field(description="The checkpoint the run continues from; it reports steps after it.")
    status: RunStatus = RunStatus.QUEUED


class InterventionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lr: float | None = Field(None, gt=0, le=10.0)
    weight_decay: float | None = Field(None, ge=0.0, le=1.0)
    momentum: float | None = Field(None, ge=0.0, lt=1.0)
    freeze_gain: bool | None = None


class InterventionAccepted(BaseModel):
    run_id: str
    changes: dict[str, float | bool]


class Lineage(BaseModel):
    parent: dict[str, Any] | None
    children: list[dict[str, Any]]
    siblings: list[dict[str, Any]]
    family: list[str]


class Checkpoints(BaseModel):
    steps: list[int]
    pinned: list[int]
    bytes: int


def _require_running(run: RunRow, what: str) -> None:
    if run["status"] != RunStatus.RUNNING:
        raise HTTPException(409, f"Run {run['id']} is {run['status']}, not running; {what}")


async def _checkpoint_now(store: Store, settings: Settings, run: RunRow) -> int:
    """Ask a running run for a checkpoint at its next step and wait for it; returns its step."""
    _require_running(run, 'fork it from a step instead ({"step": k}).')
    root, run_id = settings.checkpoint_root, run["id"]
    before = checkpoints.steps(root, run_id)
    lineage.ask(store, run_id, "checkpoint", {})
    deadline = time.monotonic() + NOW_WAIT_S
    while time.monotonic() < deadline:
        await anyio.sleep(0.05)
        new = [s for s in checkpoints.steps(root, run_id) if s not in before]
        if new:
            return max(new)
        now = store.get_run(run_id)
        if now is None or now["status"] != RunStatus.RUNNING:
            break
    raise HTTPException(
        409, f"Run {run_id} did not checkpoint within {NOW_WAIT_S:g} s (it may have ended); fork from a step."
    )


def _fork(
    store: Store,
    settings: Settings,
    parent: RunRow,
    step: int,
    changes: dict[str, Any],
    user: str | None,
    kind: str,
) -> ForkCreated:
    root = settings.checkpoint_root
    from_step = checkpoints.at_or_before(root, parent["id"], step)
    if from_step is None:
        have = checkpoints.steps(root, parent["id"])
        raise HTTPException(
            422,
            {
                "detail": f"Run {parent['id']} has no checkpoint at or before step {step}"
                + (
                    f"; its checkpoints are at steps {', '.join(map(str, have))}."
                    if have
                    else "; it has none yet."
                ),
                "fields": {"step": "no checkpoint at or before this step"},
            },
        )
    try:
        spec = child_spec(RunSpec.model_validate_json(parent["spec"]), parent["id"], from_step, changes)
    except ForkRefused as exc:
        raise HTTPException(422, {"detail": str(exc), "fields": exc.fields}) from None
    except ValidationError as exc:
        fields = validation_fields(exc.errors())
        raise HTTPException(
            422, {"detail": "; ".join(f"{k}: {v}" for k, v in fields.items()), "fields": fields}
        ) from None
    checkpoints.pin(root, parent["id"], from_step)  # before the child exists: retention keeps it from now on
    [child_id] = create_and_enqueue(store, settings, [spec], user, parent["group_id"])
    lineage.record_fork(store, child_id, parent["id"], from_step, kind)
    return ForkCreated(id=child_id, from_step=from_step)


@router.post("/{run_id}/fork", status_code=201, response_model=ForkCreated, responses=ERRORS)
async def fork(
    run_id: str, body: ForkRequest, store: StoreDep, settings: SettingsDep, user: UserDep
) -> ForkCreated:
    """Start a child run from the parent's latest checkpoint at or before `step` ("now": a running
    parent checkpoints at its next step), with `changes` to its spec. Changes that cannot continue the
    model (task, cell, hidden size, layers, …) get 422 saying why."""
    parent = get_run_or_404(store, run_id)
    step = await _checkpoint_now(store, settings, parent) if body.step == "now" else body.step
    return await anyio.to_thread.run_sync(_fork, store, settings, parent, step, body.changes, user, "fork")


@router.post("/{run_id}/resume", status_code=202, response_model=Resumed, responses=ERRORS)
def resume(run_id: str, store: StoreDep, settings: SettingsDep) -> Resumed:
    """Continue a `lost` run (its worker died) as the same run: queued again, it starts from its latest
    checkpoint that its stored history reaches (the dead worker may have written a checkpoint whose
    steps' events never got stored); the steps it trains again are not reported twice."""
    run = get_run_or_404(store, run_id)
    if run["status"] != RunStatus.LOST:
        raise HTTPException(
            409, f"Run {run_id} is {run['status']}; only a lost run is resumed (fork or resubmit others)."
        )
    step = checkpoints.at_or_before(
        settings.checkpoint_root, run_id, lineage.last_scalars_step(store, run_id)
    )
    if step is None:
        raise HTTPException(409, f"Run {run_id} has no checkpoint to resume from; resubmit it instead.")
    if not lineage.reopen_lost(store, run_id, step):
        raise HTTPException(409, f"Run {run_id} is no longer lost (resumed or deleted meanwhile).")
    try:
        enqueue_run(settings, run_id)
    except Exception as exc:  # the broker is down: the run is lost again, and can be resumed later
        store.finish_with_status(
            run_id, RunStatus.LOST, f"Could not reach the task queue: {exc}", only_from=(RunStatus.QUEUED,)
        )
        raise HTTPException(
            503, "The task queue is unavailable; retry shortly.", headers={"Retry-After": "5"}
        ) from exc
    return Resumed(id=run_id, from_step=step)


@router.post(
    "/{run_id}/interventions", status_code=202, response_model=InterventionAccepted, responses=ERRORS
)
def intervene(run_id: str, body: InterventionRequest, store: StoreDep) -> InterventionAccepted:
    """Change a running run's lr, weight decay, momentum or gain freezing from its next step; the run
    emits an `intervention` event and keeps it in its spec (a resubmit replays it)."""
    run = get_run_or_404(store, run_id)
    changes = Intervention(step=1, **body.model_dump()).changes()
    if not changes:
        raise HTTPException(
            422, {"detail": "Say what to change: lr, weight_decay, momentum or freeze_gain.", "fields": {}}
        )
    _require_running(run, "interventions change a running run (fork a finished one with changes).")
    lineage.ask(store, run_id, "intervention", {"changes": changes})
    return InterventionAccepted(run_id=run_id, changes=changes)


@router.get("/{run_id}/lineage", response_model=Lineage, responses=ERRORS)
def get_lineage(run_id: str, store: StoreDep) -> Lineage:
    """The run's parent (id, step), its siblings (the parent's other children), its children, and
    every run of its family tree."""
    get_run_or_404(store, run_id)
    parent = lineage.parent_of(store, run_id)
    siblings = [c for c in lineage.children_of(store, parent["id"]) if c["id"] != run_id] if parent else []
    return Lineage(
        parent=parent,
        children=lineage.children_of(store, run_id),
        siblings=siblings,
        family=lineage.family(store, run_id),
    )


@router.get("/{run_id}/checkpoints", response_model=Checkpoints, responses=ERRORS)
def list_checkpoints(run_id: str, store: StoreDep, settings: SettingsDep) -> Checkpoints:
    get_run_or_404(store, run_id)
    root = settings.checkpoint_root
    return Checkpoints(
        steps=checkpoints.steps(root, run_id),
        pinned=sorted(checkpoints.pins(root, run_id)),
        bytes=checkpoints.total_bytes(root, run_id),
    )


def delete_checkpoints(settings: Settings, store: Store, run_id: str) -> None:
    """A deleted run's checkpoints and lineage go with it."""
    checkpoints.delete_run(settings.checkpoint_root, run_id)
    lineage.forget(store, run_id)
