"""Public shapes of the HTTP API (torch-free): what the backend answers and the front end reads.

Create shapes are what a client sends (a `RunSpec`, a `SweepCreate`); Public shapes are what comes back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from normlab_client.events import RunStatus, RunSummary
from normlab_client.spec import NormName, RunSpec, refuse_bool, refuse_unknown_fields


class RunCreated(BaseModel):
    id: str
    status: RunStatus


class RunPublic(BaseModel):
    id: str
    spec: RunSpec  # resolved: every default filled in
    status: RunStatus
    owner: str | None = None
    group_id: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker_host: str | None = None
    device: str | None = None
    kernel_backend: str | None = None
    error: str | None = None
    summary: RunSummary = Field(default_factory=RunSummary)  # {} until the run finishes
    last_seq: int = 0  # sequence number of the newest stored event
    queue_position: int | None = None  # 1 = next to run (normlab.fair_queue order); None unless queued
    queue_wait_s: float | None = None  # about how long until it starts; None unless queued and judged
    name: str | None = None
    tags: list[str] = Field(default_factory=list)
    note: str | None = None  # markdown


class UnreadableRun(BaseModel):
    """A run of the page whose stored spec no longer reads as a RunSpec: left out of `items`."""

    id: str
    detail: str


class RunList(BaseModel):
    items: list[RunPublic]
    total: int
    offset: int
    limit: int
    unreadable: list[UnreadableRun] = Field(default_factory=list)


class SweepCreate(BaseModel):
    """A base spec and lists to cross: every norm × batch_size × seed becomes one run in one group."""

    model_config = ConfigDict(extra="forbid")  # the document says so; `_known` names the unknown keys

    base: RunSpec
    norms: list[NormName] = Field(default_factory=list, max_length=6)
    batch_sizes: list[int] = Field(default_factory=list, max_length=8)
    seeds: list[int] = Field(default_factory=list, max_length=8)
    non_preemptible: bool = Field(
        False,
        description="Admin only (403 for others when the server asks for tokens): the runs never yield their "
        "workers to interactive runs (backend/yields.py); nothing else about their order changes.",
    )

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        return refuse_unknown_fields(cls, data)

    @field_validator("batch_sizes", "seeds", mode="before")
    @classmethod
    def _numbers(cls, values: Any) -> Any:
        return [refuse_bool(v) for v in values] if isinstance(values, list) else values

    @field_validator("norms", "batch_sizes", "seeds")
    @classmethod
    def _each_once(cls, values: list[Any]) -> list[Any]:
        """A repeated value would queue the same run twice (same spec, same seed): refused."""
        repeated = sorted({v for v in values if values.count(v) > 1}, key=str)
        if repeated:
            raise ValueError(f"lists {', '.join(map(repr, repeated))} more than once; give each value once")
        return values


class SweepCreated(BaseModel):
    group_id: str
    run_ids: list[str]


class Series(BaseModel):
    """One metric's history. When downsampled, each point is a bucket: value = mean, min/max kept."""

    step: list[int]
    value: list[float | None]
    min: list[float | None]
    max: list[float | None]
    time: list[float]


class MetricsPublic(BaseModel):
    run_id: str
    series: dict[str, Series]
    total_points: int
    downsampled: bool


class ErrorDetail(BaseModel):
    """The body of every 4xx/5xx: a message that says what to change, and per-field messages."""

    detail: str
    fields: dict[str, str] = Field(default_factory=dict)
