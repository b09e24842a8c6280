"""The event schema: what a run reports while it trains. Torch-free; the service carries it unchanged.

An event is ``{run_id, seq, step, kind, time, payload}``. ``seq`` numbers a run's events from 1 with
no gaps; the results store and the live feed key on it, and it is the SSE event id.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EventKind = Literal["scalars", "hidden", "fisher", "status", "log"]


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
    grad_norm: float
    lr: float
    steps_per_s: float
    elapsed: float  # seconds since training started


class StatusPayload(BaseModel):
    """Payload of a ``status`` event."""

    status: RunStatus
    message: str | None = None
    metrics: dict[str, float | None] = Field(default_factory=dict)


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


class EventCounter:
    """Numbers a run's events 1, 2, 3, … and passes them to a sink (the callback the engine is given)."""

    def __init__(self, sink, run_id: str | None = None, start: int = 0):
        self._sink = sink
        self.run_id = run_id
        self.seq = start

    def __call__(self, kind: EventKind, step: int, payload: dict[str, Any]) -> Event:
        self.seq += 1
        event = Event(run_id=self.run_id, seq=self.seq, step=step, kind=kind, payload=payload)
        self._sink(event)
        return event
