"""The event schema: what a run reports while it trains. Torch-free; the service carries it unchanged.

An event is ``{run_id, seq, step, kind, time, payload}``. ``seq`` numbers a run's events from 1 with
no gaps; the results store and the live feed key on it, and it is the SSE event id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

EventKind = Literal["scalars", "hidden", "fisher", "status", "log", "intervention"]


class RunStatus(StrEnum):
    """A run's lifecycle, the one list every part uses (members compare equal to their strings)."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DIVERGED = "diverged"
    LOST = "lost"


ACTIVE_STATUSES: frozenset[RunStatus] = frozenset({RunStatus.QUEUED, RunStatus.RUNNING})
TERMINAL_STATUSES: frozenset[RunStatus] = frozenset(set(RunStatus) - ACTIVE_STATUSES)


class Event(BaseModel):
    """One thing a run reports: a set of scalars, a probe snapshot, a status change or a log line."""

    model_config = ConfigDict(extra="forbid")

    run_id: str | None = None
    seq: int = Field(ge=1)
    step: int = Field(ge=0)
    kind: EventKind
    time: float = Field(default_factory=time.time)
    payload: dict[str, Any] = Field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.kind == "status" and self.payload.get("status") in TERMINAL_STATUSES


class Scalars(BaseModel):
    """Payload of a ``scalars`` event. Validation metrics are None on steps without an evaluation."""

    train_loss: float
    val_loss: float | None = None
    accuracy: float | None = None  # classification tasks (validation accuracy, 0..1)
    bpc: float | None = None  # charlm: validation bits per character
    recall: float | None = None  # retrieval tasks: validation recall@K, 0..1
    grad_norm: float
    lr: float
    steps_per_s: float
    elapsed: float  # seconds since training started


class StatusPayload(BaseModel):
    """Payload of a ``status`` event."""

    status: RunStatus
    message: str | None = None
    metrics: dict[str, float | None] = Field(default_factory=dict)


class LogPayload(BaseModel):
    """Payload of a ``log`` event: one line of the run's log; the engine may add context (a traceback)."""

    model_config = ConfigDict(extra="allow")

    level: Literal["debug", "info", "warning", "error"] = "info"
    message: str


class HiddenPayload(BaseModel):
    """Payload of a ``hidden`` event (workers/probes/hidden.py owns the detail of each entry).

    Feed-forward and convolutional models send ``layers`` (one entry per hidden layer: summed-input
    mean/std, activation norm, weight-row norms, gain); recurrent ones send per-time-step lists."""

    model_config = ConfigDict(extra="allow")

    layers: list[dict[str, Any]] | None = None
    time_steps: int | None = None  # the sequence's length; the series below hold at most a few points
    time_index: list[int] | None = None  # which steps the series hold, when thinned
    hidden_norms: list[float | None] | None = None
    cell_norms: list[float | None] | None = None  # LSTM only
    summed_mean: list[float | None] | None = None
    summed_std: list[float | None] | None = None
    grad_norms: list[float | None] | None = None


class FisherPayload(BaseModel):
    """Payload of a ``fisher`` event: the curvature probe's estimate (workers/probes/curvature.py)."""

    model_config = ConfigDict(extra="allow")

    trace: dict[str, float | None]
    trace_estimator: dict[str, str]
    # the scale-invariant weight sets; events stored before the key was "weight_sets" say "groups"
    weight_sets: list[dict[str, Any]] = Field(validation_alias=AliasChoices("weight_sets", "groups"))
    lambda_max: float | None = None
    eta_lambda_max: float | None = None
    hessian_lambda_max: float | None = None
    eta_hessian_lambda_max: float | None = None
    # each λ_max's bound r/θ (relative Ritz residual: λ_max ≤ θ (1 + bound) once θ sits at the top
    # eigenvalue; θ ≤ λ_max always) and whether it stopped above the tolerance: then a lower bound
    lambda_tolerance: float | None = None
    lambda_max_rel_bound: float | None = None
    lambda_max_lower_bound: bool = False
    hessian_lambda_max_rel_bound: float | None = None
    hessian_lambda_max_lower_bound: bool = False
    lr: float | None = None


def fisher_weight_sets(payload: dict[str, Any]) -> list[Any]:
    """A stored fisher payload's weight sets (those stored before the key was "weight_sets" say
    "groups")."""
    weight_sets: list[Any] = payload.get("weight_sets", payload.get("groups", []))
    return weight_sets


class KnobChange(BaseModel):
    old: float | bool
    new: float | bool


class InterventionPayload(BaseModel):
    """Payload of an ``intervention`` event: what changed at its step (lr, weight_decay, momentum,
    freeze_gain: old → new), and whether the spec scheduled it or someone asked while it ran."""

    changes: dict[str, KnobChange]
    source: Literal["spec", "live"]


PAYLOADS: dict[str, type[BaseModel]] = {
    "intervention": InterventionPayload,
    "scalars": Scalars,
    "status": StatusPayload,
    "log": LogPayload,
    "hidden": HiddenPayload,
    "fisher": FisherPayload,
}


def check_payload(kind: EventKind, payload: dict[str, Any]) -> BaseModel:
    """The payload read as its kind's model; raises pydantic.ValidationError when it breaks the contract."""
    return PAYLOADS[kind].model_validate(payload)


class _TypedEvent(BaseModel):
    run_id: str | None = None
    seq: int = Field(ge=1)
    step: int = Field(ge=0)
    time: float

    @property
    def terminal(self) -> bool:
        return False


class ScalarsEvent(_TypedEvent):
    kind: Literal["scalars"]
    payload: Scalars


class HiddenEvent(_TypedEvent):
    kind: Literal["hidden"]
    payload: HiddenPayload


class FisherEvent(_TypedEvent):
    kind: Literal["fisher"]
    payload: FisherPayload


class LogEvent(_TypedEvent):
    kind: Literal["log"]
    payload: LogPayload


class InterventionEvent(_TypedEvent):
    kind: Literal["intervention"]
    payload: InterventionPayload


class StatusEvent(_TypedEvent):
    kind: Literal["status"]
    payload: StatusPayload

    @property
    def terminal(self) -> bool:
        return self.payload.status in TERMINAL_STATUSES


# An event read back (from the store, the live feed, the API) with its payload typed by its kind.
TypedEvent = Annotated[
    ScalarsEvent | HiddenEvent | FisherEvent | LogEvent | InterventionEvent | StatusEvent,
    Field(discriminator="kind"),
]
_TYPED_EVENT: TypeAdapter[TypedEvent] = TypeAdapter(TypedEvent)


def parse_event(data: str | bytes | dict[str, Any]) -> TypedEvent:
    """An Event's JSON (or dict) as the member of the union its kind names; ValidationError otherwise."""
    if isinstance(data, dict):
        return _TYPED_EVENT.validate_python(data)
    return _TYPED_EVENT.validate_json(data)


class RunSummary(BaseModel):
    """What a finished run stores as its ``summary`` (and the API returns); empty until it finishes.

    Only the fields that were set are serialized, so an unfinished run's summary stays ``{}``."""

    metrics: dict[str, float | None] = Field(default_factory=dict)  # the final RunResult.metrics
    probes: dict[str, Any] | None = None  # the probes' last payloads and their measured overhead
    step: int | None = None
    wall_time: float | None = None
    # the engine's path choices (workers.engine.options.EngineOptions.record): kernel backend, CUDA graphs,
    # the CPU LSTM's C step
    engine: dict[str, str | bool] | None = None

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]  # no return type: keeps the schema
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}


class RunResult(BaseModel):
    """What the engine returns when a run ends (also the CLI's ``--json`` output, with the spec)."""

    status: RunStatus
    step: int
    metrics: dict[str, float | None] = Field(default_factory=dict)  # final train/val/test metrics
    wall_time: float
    device: str
    kernel_backend: str
    error: str | None = None
    probes: dict[str, Any] | None = None
    engine: dict[str, str | bool] | None = None  # the EngineOptions the run used (see RunSummary)


class EventCounter:
    """Numbers a run's events 1, 2, 3, … and passes them to a sink (the callback the engine is given)."""

    def __init__(self, sink: Callable[[Event], object], run_id: str | None = None, start: int = 0):
        self._sink = sink
        self.run_id = run_id
        self.seq = start

    def __call__(self, kind: EventKind, step: int, payload: dict[str, Any], check: bool = True) -> Event:
        """check=False: the caller vouches for the payload (the same code built one that passed the check
        earlier in this run, e.g. the training loop's per-step scalars, where the check is a visible share
        of a small model's step)."""
        if check:
            check_payload(kind, payload)  # the engine's events keep the contract the API and pages read
        self.seq += 1
        event = Event(run_id=self.run_id, seq=self.seq, step=step, kind=kind, payload=payload)
        self._sink(event)
        return event
