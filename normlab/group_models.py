"""Public shapes of preset launches and groups (`POST /api/presets/{name}`, `GET /api/groups/{id}`).

Kept apart from `normlab.api_models` only so this change merges cleanly; the shapes are the API's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from normlab.events import RunStatus
from normlab.spec import MAX_STEPS, refuse_bool

MAX_SEEDS = 16


class PresetLaunch(BaseModel):
    """Optional overrides when launching a preset: its seeds (default: the preset's) and steps."""

    model_config = ConfigDict(extra="forbid")

    seeds: list[int] | None = Field(
        None,
        min_length=1,
        max_length=MAX_SEEDS,
        description="Distinct seeds ≥ 0 (default: the preset's, ≥ 5).",
    )
    steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="Override every run's steps.")

    @field_validator("seeds", mode="before")
    @classmethod
    def _numbers(cls, values: Any) -> Any:
        return [refuse_bool(v) for v in values] if isinstance(values, list) else values

    @field_validator("steps", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return refuse_bool(value)

    @field_validator("seeds")
    @classmethod
    def _distinct_non_negative(cls, values: list[int] | None) -> list[int] | None:
        if values is None:
            return None
        if any(v < 0 or v > 2**31 - 1 for v in values):
            raise ValueError("seeds must be integers between 0 and 2147483647")
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise ValueError(f"seed(s) {', '.join(map(str, repeated))} given more than once; give each once")
        return values


class PresetLaunched(BaseModel):
    group_id: str
    run_ids: list[str]


class GroupRun(BaseModel):
    id: str
    cell: str  # the preset's label, or the sweep's varied fields ("norm=layer, batch_size=4")
    seed: int
    status: RunStatus
    final: float | None = None  # the group's metric at the end of the run (None until it finishes)
    metrics: dict[str, float | None] = Field(default_factory=dict)  # every final metric of the run


class Curve(BaseModel):
    steps: list[int]
    mean: list[float]
    std: list[float]  # sample std over seeds at each step: the band is mean ± std
    at: list[dict[str, Any]]  # the mean near ¼, ½ and the end of training
    auc: float | None  # area under the mean curve ÷ its span


class Cell(BaseModel):
    """One cell over its finished seeds."""

    label: str
    spec: dict[str, Any]  # the cell's resolved spec without the seed
    seeds: list[int]
    values: list[float | None]  # the final metric per finished seed
    n: int  # finished seeds with a finite final metric
    mean: float | None
    std: float | None
    curve: Curve
    traces: dict[str, Any] = Field(default_factory=dict)  # hidden-state figures (normlab.claims)


class Claim(BaseModel):
    """A claim judged by normlab.claims: the effect (paired mean difference ± its standard error) and rule."""

    model_config = ConfigDict(extra="allow")  # kind-specific numbers: margin, chance, versus, message

    claim: str
    kind: str
    holds: bool
    all_seeds: bool
    difference: float | None = None
    se: float | None = None
    n: int | None = None
    per_seed: list[float | None] = Field(default_factory=list)
    rule: str
    pending: bool = False  # too few paired seeds yet for a verdict (normlab.claims.pending)
    seeds_in: int | None = None  # paired seeds that ended (None: a claim checked on the spec)
    seeds_expected: int | None = None  # seeds launched


class MapPoint(BaseModel):
    """One axis value of a "where does it help?" map: Δ = A − B paired by seed (normlab.maps)."""

    value: Any
    difference: float | None
    se: float | None
    n: int
    per_seed: list[float]
    favours: Literal["a", "b", "neither"] | None  # beyond z paired standard errors; None without data


class ScaleMapPublic(BaseModel):
    axis: str  # the RunSpec field varied
    axis_name: str  # its short name: T, batch, depth, η
    values: list[Any]
    a: str
    b: str
    metric: str
    claim_side: Literal["below", "above"]  # where Δ lies when A beats B
    z: float
    points: list[MapPoint]


class GroupPublic(BaseModel):
    group_id: str
    kind: Literal["preset", "sweep", "group"]
    preset: str | None = None
    title: str | None = None
    expect: str | None = None
    setup: str | None = None
    metric: str
    higher_is_better: bool
    varied: list[str] = Field(default_factory=list)  # a sweep's fields that differ between cells
    counts: dict[str, int]  # runs per status
    done: bool  # every run has ended
    runs: list[GroupRun]
    cells: list[Cell]
    claims: list[Claim] | None = None  # a preset's claims over its finished seeds
    holds: bool | None = None
    all_seeds: bool | None = None
    map: ScaleMapPublic | None = None  # a map preset's effect per axis value
    pending: bool | None = None  # some claim still waits for seeds
