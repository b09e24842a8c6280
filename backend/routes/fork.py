"""Forks and interventions: fork a run from a checkpoint with changes, resume a lost run, change a
running run's knobs, and read a run's lineage and checkpoints."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

import anyio
from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from backend import interventions
from backend.auth import require_owner
from backend.deps import SettingsDep, StoreDep, UserDep, get_run_or_404
from backend.errors import validation_fields
from backend.runs_common import create_and_enqueue, stored_spec
from normlab import checkpoints
from normlab.fork import ForkRefused, child_spec
from normlab.queue import enqueue_run
from normlab.settings import Settings
from normlab.store import RunRow, Store, lineage
from normlab_client.api_models import ErrorDetail
from normlab_client.events import RunStatus
from normlab_client.spec import Intervention, refuse_bool

router = APIRouter(prefix="/api/runs", tags=["fork"])
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorDetail} for code in (403, 404, 409, 422, 429)}
NOW_WAIT_S = 15.0  # a running run checkpoints at its next step; one step of the largest run allowed


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: int | Literal["now"] = Field(
        description="Fork after this step (one the run has reached); 'now': a running run's next step."
    )
    changes: dict[str, Any] = Field(default_factory=dict, description="RunSpec fields the child changes.")

    @field_validator("step", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return refuse_bool(value)


class ForkCreated(BaseModel):
    id: str
    from_step: int = Field(description="The step the child continues after: the one asked for.")
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

    @field_validator("lr", "weight_decay", "momentum", mode="before")
    @classmethod
    def _numbers(cls, value: Any) -> Any:
        return refuse_bool(value)


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
    reached = lineage.last_scalars_step(store, parent["id"])
    loaded = checkpoints.at_or_before(root, parent["id"], step)
    refused_write = [(s, why) for s, why in lineage.checkpoint_failures(store, parent["id"]) if s <= step]
    if refused_write and (loaded is None or refused_write[-1][0] > loaded):
        raise HTTPException(422, unwritten(parent["id"], step, refused_write[-1], loaded))
    if step != loaded and step > reached:  # (a checkpoint asked for "now" may be ahead of the stored events)
        raise HTTPException(
            422,
            {
                "detail": f"Run {parent['id']} has reached step {reached}; fork at a step up to {reached}.",
                "fields": {"step": f"at most {reached}"},
            },
        )
    if loaded is None:  # (runs of an engine that did not checkpoint step 0)
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
    parent_spec = stored_spec(parent)  # 409 naming the field when it cannot be read
    try:  # the child loads the checkpoint of `loaded` and replays the parent's steps up to `step`
        spec = child_spec(parent_spec, parent["id"], step, changes, loaded)
    except ForkRefused as exc:
        raise HTTPException(422, {"detail": str(exc), "fields": exc.fields}) from None
    except ValidationError as exc:
        fields = validation_fields(exc.errors())
        raise HTTPException(
            422, {"detail": "; ".join(f"{k}: {v}" for k, v in fields.items()), "fields": fields}
        ) from None
    # Held before the child exists (a running parent's retention must not delete it meanwhile), for good
    # once the child is stored, and let go if admission refuses the child: a refused fork pins nothing.
    held = checkpoints.pin(root, parent["id"], loaded, holder=uuid.uuid4().hex)
    try:
        [child_id] = create_and_enqueue(store, settings, [spec], user, parent["group_id"])
        lineage.record_fork(store, child_id, parent["id"], step, kind)
        checkpoints.pin(root, parent["id"], loaded)
    finally:
        checkpoints.unpin(held)
    return ForkCreated(id=child_id, from_step=step)


def unwritten(run_id: str, step: int, failed: tuple[int, str], earlier: int | None) -> dict[str, Any]:
    """Why a fork or resume at `step` is refused: the checkpoint it needs could not be written."""
    detail = (
        f"Run {run_id}'s checkpoint of step {failed[0]} could not be written ({failed[1]}), so it "
        f"cannot continue from step {step}"
        + (f"; its latest checkpoint before that is at step {earlier}." if earlier is not None else ".")
    )
    return {"detail": detail, "fields": {"step": f"no checkpoint: {failed[1]}"}}


@router.post("/{run_id}/fork", status_code=201, response_model=ForkCreated, responses=ERRORS)
async def fork(
    run_id: str, body: ForkRequest, store: StoreDep, settings: SettingsDep, user: UserDep
) -> ForkCreated:
    """Start a child run from the parent's state after `step` ("now": a running parent checkpoints at
    its next step), with `changes` to its spec: it loads the latest checkpoint at or before `step` and
    first replays the parent's steps up to `step` (at most one checkpoint interval). Changes that
    cannot continue the model (task, cell, hidden size, layers, …) get 422 saying why."""
    parent = get_run_or_404(store, run_id)
    step = await _checkpoint_now(store, settings, parent) if body.step == "now" else body.step
    return await anyio.to_thread.run_sync(_fork, store, settings, parent, step, body.changes, user, "fork")


@router.post("/{run_id}/resume", status_code=202, response_model=Resumed, responses=ERRORS)
def resume(run_id: str, request: Request, store: StoreDep, settings: SettingsDep) -> Resumed:
    """Continue a `lost` run (its worker died) as the same run: queued again, it starts from its latest
    checkpoint that its stored history reaches (the dead worker may have written a checkpoint whose
    steps' events never got stored); the steps it trains again are not reported twice."""
    run = get_run_or_404(store, run_id)
    require_owner(request, run, "resume")
    if run["status"] != RunStatus.LOST:
        raise HTTPException(
            409, f"Run {run_id} is {run['status']}; only a lost run is resumed (fork or resubmit others)."
        )
    step = checkpoints.at_or_before(
        settings.checkpoint_root, run_id, lineage.last_scalars_step(store, run_id)
    )
    if step is None:
        failed = lineage.checkpoint_failures(store, run_id)
        if failed:
            raise HTTPException(409, unwritten(run_id, failed[-1][0], failed[-1], None))
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
def intervene(
    run_id: str,
    body: InterventionRequest,
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    user: UserDep,
) -> InterventionAccepted:
    """Change a running run's lr, weight decay, momentum or gain freezing from its next step; the run
    emits an `intervention` event and keeps it in its spec (a resubmit replays it). Its owner or an
    admin only; at most `NORMLAB_INTERVENTION_RATE_PER_MINUTE` a minute per user (429), and a run takes
    as many as a spec holds, its spec's own included (422)."""
    run = get_run_or_404(store, run_id)
    require_owner(request, run, "change")
    changes = Intervention(step=1, **body.model_dump()).changes()
    if not changes:
        raise HTTPException(
            422, {"detail": "Say what to change: lr, weight_decay, momentum or freeze_gain.", "fields": {}}
        )
    _require_running(run, "interventions change a running run (fork a finished one with changes).")
    interventions.ask(store, settings, user, run, changes)
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
