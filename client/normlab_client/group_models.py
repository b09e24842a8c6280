"""Public shapes of preset launches and groups (`POST /api/presets/{name}`, `GET /api/groups/{id}`).

Kept apart from `normlab_client.api_models` only so this change merges cleanly; the shapes are the API's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from normlab_client.events import RunStatus
from normlab_client.spec import MAX_STEPS, refuse_bool

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
    swap: dict[str, str] = Field(
        default_factory=dict,
        max_length=6,
        description='Normalizers to run in place of the preset\'s, e.g. {"layer": "dyt"}: every run with '
        "norm layer uses dyt instead, and the claims about layer are judged for dyt.",
    )
    fresh: int | None = Field(
        None,
        ge=1,
        le=8,
        description="Replicate: draw this many seeds now from a range no rule saw (≥ 10000) instead of "
        "the preset's; the group is recorded as a fresh draw.",
    )
    non_preemptible: bool = Field(
        False,
        description="Admin only (403 for others when the server asks for tokens): the runs never yield their "
        "workers to interactive runs (backend/yields.py); nothing else about their order changes.",
    )

    @field_validator("seeds", mode="before")
    @classmethod
    def _numbers(cls, values: Any) -> Any:
        return [refuse_bool(v) for v in values] if isinstance(values, list) else values

    @field_validator("steps", "fresh", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return refuse_bool(value)

    @model_validator(mode="after")
    def _seeds_or_fresh(self) -> PresetLaunch:
        if self.seeds is not None and self.fresh is not None:
            raise ValueError("give either seeds or fresh (a count of seeds to draw), not both")
        return self

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


class PresetEstimate(BaseModel):
    """How long a preset takes on this server, from the measured run times of its earlier launches here
    as the preset defines them (no steps override, no swapped normalizer); `GET /api/presets` gives None
    for a preset none of whose runs has completed here yet: no estimate is invented."""

    measured: int  # completed runs of those launches, each timed from its start to its end
    run_s: float  # their median seconds
    one_worker_s: float  # Σ over a launch's runs of its arm's median (an arm never timed: run_s)
    last_launch_s: float | None  # the latest such launch that completed whole: first start → last end


class StoredGroupError(ValueError):
    """A stored group (its metadata, or one of its runs) that this release cannot read; the message names
    the group, the run and the fields."""


def problems(exc: ValidationError, limit: int = 3) -> str:
    """'labels: Input should be a valid dictionary; …': where and what, for a message."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()[:limit]
    )


class PresetMeta(BaseModel):
    """What launched a preset's group: the preset, each run's label in it, and the steps override."""

    kind: Literal["preset"] = "preset"
    preset: str
    labels: dict[str, str]  # run id -> the preset's run label (its arm)
    steps: int | None = None
    swap: dict[str, str] = Field(default_factory=dict)  # normalizers run in place of the preset's
    fresh: bool = False  # its seeds were drawn at launch from the fresh range (a replication)
    non_preemptible: bool = False  # marked by an admin: its runs never yield (backend/yields.py)


class SweepMeta(BaseModel):
    """What launched a sweep: the spec fields it varies (its arms are their combinations)."""

    kind: Literal["sweep"] = "sweep"
    varied: list[str] = Field(default_factory=list)
    non_preemptible: bool = False  # marked by an admin: its runs never yield (backend/yields.py)


class PlainMeta(BaseModel):
    """A group launched by neither (arms by the fields that differ between its runs)."""

    kind: Literal["group"] = "group"


GroupMeta = Annotated[PresetMeta | SweepMeta | PlainMeta, Field(discriminator="kind")]


class GroupRun(BaseModel):
    id: str
    arm: str  # the preset's label, or the sweep's varied fields ("norm=layer, batch_size=4")
    seed: int
    status: RunStatus
    final: float | None = None  # the group's metric at the end of the run (None until it finishes)
    metrics: dict[str, float | None] = Field(default_factory=dict)  # every final metric of the run


class CurvePoint(BaseModel):
    """The mean validation curve near one fraction of training (None before its first evaluation)."""

    fraction: float
    step: int | None
    value: float | None


class Curve(BaseModel):
    steps: list[int]
    mean: list[float]
    std: list[float]  # sample std over seeds at each step: the band is mean ± std
    at: list[CurvePoint]  # the mean near ¼, ½ and the end of training
    auc: float | None  # area under the mean curve ÷ its span


class TraceStat(BaseModel):
    """One hidden-state figure of an arm (normlab.arms.trace_stats) per seed, and its mean ± std."""

    values: list[float | None]
    mean: float
    std: float


TraceName = Literal[
    "hidden_spread",
    "hidden_spread_late",
    "grad_orders",
    "elr_orders",
    "angular_late",
    "eta_lambda_late",
    "eta_lambda_first",
]


class Arm(BaseModel):
    """One arm over its finished seeds."""

    label: str
    spec: dict[str, Any]  # the arm's resolved spec without the seed (JSON, as stored)
    seeds: list[int]
    values: list[float | None]  # the final metric per finished seed
    n: int  # finished seeds with a finite final metric
    mean: float | None
    std: float | None
    curve: Curve
    traces: dict[TraceName, TraceStat] = Field(default_factory=dict)  # hidden-state figures


class CellResult(Arm):
    """An arm as normlab.arms aggregates it: the public arm and what `normlab reproduce` also reports
    (each seed's status, messages of the runs that did not complete, wall time, area under each curve)."""

    statuses: list[str | None]
    messages: list[str | None]
    wall_time: float
    aucs: list[float | None]

    def public(self) -> Arm:
        return Arm.model_validate(self.model_dump(include=set(Arm.model_fields)))


class Effect(BaseModel):
    """A paired effect: the mean of the per-seed differences, its standard error and how many."""

    difference: float | None
    se: float | None
    n: int


class Companion(BaseModel):
    """A claim's robust companion: an exact one-sided sign test over its paired seeds (claim_rules)."""

    wins: int  # seeds pointing the claimed way (inside the margin, for an equivalence)
    n: int  # paired seeds counted, a diverged run's included
    diverged: int  # of them, seeds where a run diverged or failed
    p: float | None  # P(X ≥ wins) for X ~ Binomial(n, ½); None without a seed
    holds: bool | None  # p ≤ 5 %; None until the planned seeds are in
    text: str  # "layer lower on 5 of 5 seeds (sign test p = 0.0312)"


class Judged(BaseModel):
    """What every judged claim reports: the effect (paired mean difference ± its standard error), its t
    interval, whether the t rule holds (None until the planned seeds are in: no verdict either way), the
    sign-test companion and the rules that decided it."""

    claim: str
    holds: bool | None
    all_seeds: bool | None  # every seed pointed the claimed way (None until the planned seeds are in)
    difference: float | None = None
    se: float | None = None
    n: int | None = None
    t: float | None = None  # t(0.95, n − 1), the quantile for the n in hand
    interval: list[float] | None = None  # difference ∓ t·se: each side a one-sided 95 % bound
    per_seed: list[float | None] = Field(default_factory=list)
    rule: str
    companion: Companion | None = None
    seeds_in: int | None = None  # paired seeds that ended (None: a claim checked on the spec)


class Comparison(Judged):
    """One of a "best" claim's comparisons (A better than one other run)."""

    kind: Literal["better"]


class Claim(Judged):
    """What every claim of a preset reports (each kind below adds its own numbers)."""

    kind: str  # which rule: one of the kinds below
    pending: bool = False  # the planned seeds are not all in yet: no verdict (normlab.claims.pending)
    seeds_expected: int | None = None  # seeds launched
    decides: str = ""  # which rule decides, and how the companion is read
    companion_rule: str = ""  # the companion's rule, with its rule for a diverged run
    declared: str | None = None  # the commit that declared the claim, its margin and its grid
    exploratory: bool = False  # declared after runs on its verdict seeds (normlab.declarations)
    exploratory_why: str | None = None


class PairedClaim(Claim):
    """A on its own beats (or is steadier, converges faster, is less sensitive than) B, paired by seed."""

    kind: Literal["better", "faster", "steadier", "gradient", "gap"]


class CloseClaim(Claim):
    """A ≈ B: the difference's interval lies inside the equivalence margin."""

    kind: Literal["close"]
    margin: float | None  # ±EQUIV_REL of B's mean (None while B has no finished seed)


class TrainsClaim(Claim):
    """A ends below a uniform guess's loss ln(classes)."""

    kind: Literal["trains"]
    chance: float | None  # ln(classes); None for a task without classes


class ChanceClaim(Claim):
    """A stays at a uniform guess: its final loss's interval around ln(classes) lies inside the margin."""

    kind: Literal["chance"]
    margin: float | None  # ±EQUIV_REL of ln(classes); None for a task without classes
    chance: float | None  # ln(classes)


class DecaysClaim(Claim):
    """A's effective learning rate η/‖w‖² falls from its first Fisher estimate to its last."""

    kind: Literal["decays"]


class LineClaim(Claim):
    """A measured series sits at a theory line: per seed its ratio to the line, minus 1, within ±margin
    (per_seed and difference are ratio − 1)."""

    kind: Literal["equilibrium", "edge"]
    margin: float
    line: float | None  # √(2ηλ/(1+μ)) or 2; None when the spec has no line (no weight decay)


class BestClaim(Claim):
    """A better than every other run of the preset."""

    kind: Literal["best"]
    versus: list[Comparison]


class RefusedClaim(Claim):
    """The spec refuses a normalizer at the preset's batch size (checked, not trained)."""

    kind: Literal["refused"]
    message: str | None  # the spec's refusal; None when it was accepted


AnyClaim = Annotated[
    PairedClaim | CloseClaim | TrainsClaim | ChanceClaim | DecaysClaim | LineClaim | BestClaim | RefusedClaim,
    Field(discriminator="kind"),
]


class Verdict(BaseModel):
    """A preset's claims over the arms present, and the overall verdict."""

    claims: list[AnyClaim]
    pending: bool  # some claim still waits for seeds
    holds: bool | None  # None while a claim waits for its planned seeds
    all_seeds: bool | None
    rule: str | None  # why there is no claim, when there is none


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
    varied: list[str] = Field(default_factory=list)  # a sweep's fields that differ between arms
    counts: dict[str, int]  # runs per status
    done: bool  # every run has ended
    runs: list[GroupRun]
    arms: list[Arm]
    claims: list[AnyClaim] | None = None  # a preset's claims over its finished seeds
    holds: bool | None = None
    all_seeds: bool | None = None
    map: ScaleMapPublic | None = None  # a map preset's effect per axis value
    pending: bool | None = None  # some claim still waits for seeds
