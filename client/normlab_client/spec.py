"""`RunSpec`: what to train. One pydantic model, torch-free, shared by engine, API, CLI and front end.

Fields left as ``None`` take the task's defaults (see `normlab_client.catalog.TASKS`); `RunSpec.resolved()`
fills them in, and the resolved spec is what every run stores. Every field has a range, and the
combinations are checked here, each violation answered with a message that says what to change.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from normlab_client.catalog import NORMS, TASKS

TaskName = Literal[
    "digits",
    "digits-mse",
    "mnist",
    "mnist5k",
    "mnist1d",
    "seq-digits",
    "pixel-digits",
    "pixel-mnist5k",
    "handwriting",
    "draw",
    "order-embed",
    "adding",
    "copy",
    "charlm",
    "conv-digits",
    "conv-mnist5k",
    "reverse",
    "watched",
]
# A normalizer's name: the built-in ones (catalog.NORMS) and any registered with normlab_client.norms;
# which ones a task takes is checked with the other combinations (combination_problems).
NormName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,23}$")]
CellName = Literal["lstm", "gru", "tanh"]

MAX_STEPS = 200_000
# A training loop of the user's own, streamed in by watch() (normlab_client.watch): a run of this task is
# never trained here, so it has no catalog entry, defaults or combinations to check.
WATCHED_TASK = "watched"
TRANSFORMER_TASKS = ("reverse",)  # tasks whose model is a Transformer (ln_position applies)
NAMED_UNKNOWN = 5  # an answer names this many unknown fields at most


def refuse_unknown_fields(model: type[BaseModel], data: Any) -> Any:
    """One cheap error naming the first few unknown keys, before pydantic validates (and its error
    answer would echo) every one of them: a body of 60,000 unknown keys costs a dict scan, not seconds."""
    fields = model.model_fields
    if isinstance(data, dict) and not data.keys() <= fields.keys():
        unknown = [k for k in itertools.islice((k for k in data if k not in fields), NAMED_UNKNOWN)]
        more = len(data.keys() - fields.keys()) - len(unknown)
        named = ", ".join(repr(str(k)[:40]) for k in unknown) + (f" and {more:,} more" if more else "")
        raise PydanticCustomError(
            "unknown_fields",
            "{message}",
            {"message": f"Unknown field(s) {named}; the fields are {', '.join(fields)}."},
        )
    return data


def refuse_bool(value: Any) -> Any:
    """JSON true/false where a number is expected is a mistake, not 1/0 (pydantic's lax mode reads it
    as one)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


def warm_vectors(kind: str) -> int:
    """Krylov vectors a warm λ_max(F) estimate takes by default, per task kind: conv nets 3 (with 2, a
    warm estimate 50 steps after the last one stays well below the converged λ_max), MLPs and recurrent
    nets 2. `normlab bench probes --accuracy` measures how far below it each setting lands."""
    return 3 if kind == "image" else 2


class ProbeSpec(BaseModel):
    """What the probes measure, and how often (hidden-state traces, Fisher curvature)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="Collect hidden-state traces and Fisher curvature.")
    trace_every: int = Field(25, ge=1, le=100_000, description="Steps between hidden-state snapshots.")
    fisher_every: int = Field(50, ge=1, le=100_000, description="Steps between Fisher estimates.")
    power_iterations: int | None = Field(
        None,
        ge=1,
        le=50,
        description="Krylov vectors at least per warm-started λ_max(F), which then iterates to its "
        "tolerance (default: 3 on conv nets, 2 elsewhere).",
    )
    hessian: bool = Field(False, description="Also estimate λ_max of the Hessian (edge of stability).")
    empirical_fisher: bool = Field(False, description="Also report the empirical Fisher, labelled as such.")
    budget: float = Field(
        0.15, gt=0, le=5.0, description="Largest fraction of training time the probes may take."
    )

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        return refuse_unknown_fields(cls, data)

    @field_validator("trace_every", "fisher_every", "power_iterations", "budget", mode="before")
    @classmethod
    def _numbers(cls, value: Any) -> Any:
        return refuse_bool(value)


class Intervention(BaseModel):
    """A change to a run's knobs taking effect at the start of `step` (a field left out is unchanged)."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=1, le=MAX_STEPS, description="The first step trained with the change.")
    lr: float | None = Field(None, gt=0, le=10.0)
    weight_decay: float | None = Field(None, ge=0.0, le=1.0)
    momentum: float | None = Field(None, ge=0.0, lt=1.0)
    freeze_gain: bool | None = Field(
        None, description="Freeze (true) or unfreeze (false) the normalizers' gains."
    )

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        return refuse_unknown_fields(cls, data)

    @field_validator("step", "lr", "weight_decay", "momentum", mode="before")
    @classmethod
    def _numbers(cls, value: Any) -> Any:
        return refuse_bool(value)

    def changes(self) -> dict[str, float | bool]:
        """The knobs this intervention sets, without its step."""
        return {k: v for k, v in self.model_dump(exclude={"step"}).items() if v is not None}


MAX_INTERVENTIONS = 100


class ParentRef(BaseModel):
    """Where a forked run starts: its parent run, the step it forks at, and the parent's checkpoint it
    loads (at or before that step: the steps between are replayed with the parent's spec first)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$", description="The parent run's id.")
    step: int = Field(ge=0, le=MAX_STEPS, description="The parent's step the child starts after.")
    checkpoint: int | None = Field(
        None,
        ge=0,
        le=MAX_STEPS,
        description="The parent's checkpoint the child loads (default: `step`); the steps after it up to "
        "`step` are replayed with the parent's spec, bit for bit on the CPU.",
    )
    replay: list[Intervention] = Field(
        default_factory=list,
        max_length=MAX_INTERVENTIONS,
        description="The parent's interventions after `checkpoint` up to `step`, applied in the replay.",
    )

    @model_validator(mode="after")
    def _checkpoint_before_step(self) -> ParentRef:
        if self.checkpoint is not None and self.checkpoint > self.step:
            raise ValueError(f"checkpoint {self.checkpoint} is past the fork step {self.step}")
        return self


# RunSpec fields that say where a run comes from and what was done to it, not what to train: no CLI
# option or form field of their own.
LINEAGE_FIELDS = ("parent", "interventions")


class RunSpec(BaseModel):
    """One training run: task, normalizer, model, optimizer, schedule, device and probes."""

    model_config = ConfigDict(extra="forbid")

    task: TaskName = Field("digits", description="What to learn.")
    norm: NormName = Field("layer", description="Which normalizer the hidden layers use.")
    batch_size: int = Field(32, ge=1, le=4096, description="Cases per mini-batch (1 = online learning).")
    steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="Optimizer steps.")
    lr: float | None = Field(None, gt=0, le=10.0, description="Learning rate.")
    optimizer: Literal["adam", "sgd"] = Field("adam", description="adam, or sgd with momentum.")
    momentum: float = Field(0.9, ge=0.0, lt=1.0, description="SGD momentum (ignored by adam).")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="L2 weight decay.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seeds data splits, initialization and sampling.")
    hidden_size: int | None = Field(None, ge=1, le=4096, description="Hidden units per layer.")
    layers: int | None = Field(None, ge=1, le=8, description="Hidden layers (recurrent layers for RNNs).")
    cell: CellName | None = Field(None, description="Recurrent cell, for sequential tasks only.")
    seq_len: int | None = Field(None, ge=1, le=5000, description="Training sequence length.")
    eval_seq_len: int | None = Field(
        None, ge=1, le=10000, description="Evaluate on sequences of this length (≥ seq_len)."
    )
    gain_init: float = Field(1.0, gt=0.0, le=10.0, description="Initial normalization gain (paper: 1).")
    bn_variance: Literal["biased", "unbiased"] = Field(
        "biased",
        description="BatchNorm's training variance: 'biased' (÷B) or 'unbiased' (÷(B−1), §6.6's "
        "choice at small batch sizes).",
    )
    ln_placement: Literal["full", "cell"] = Field(
        "full", description="LSTM LayerNorm: 'full' = eq. 20/26, 'cell' = LN(c_t) only, eq. 29."
    )
    weight_standardization: bool = Field(
        False,
        description="ConvNet: standardize each conv filter over its fan-in before the conv (Weight "
        "Standardization, Qiao et al. 2019), with a normalizer after it (batch, layer, rms or group).",
    )
    ln_position: Literal["pre", "post"] = Field(
        "pre",
        description="Transformer LayerNorm: 'pre' = inside each residual branch, x + F(LN(x)); 'post' = "
        "after the residual sum, LN(x + F(x)) (Xiong et al. 2020).",
    )
    eval_every: int = Field(50, ge=1, le=100_000, description="Steps between validation evaluations.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where to train.")
    probes: ProbeSpec = Field(default_factory=ProbeSpec)
    checkpoint_every: int | None = Field(
        None,
        ge=1,
        le=MAX_STEPS,
        description="Steps between checkpoints (default: ceil(steps / 10), i.e. every 10 % of the run); "
        "a run also checkpoints its first and last step. A fork between two replays at most this many.",
    )
    parent: ParentRef | None = Field(None, description="A forked run's parent and fork step.")
    interventions: list[Intervention] = Field(
        default_factory=list,
        max_length=MAX_INTERVENTIONS,
        description="Changes to lr, weight decay, momentum or gain freezing, each from its step on.",
    )

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        return refuse_unknown_fields(cls, data)

    @field_validator(
        "checkpoint_every",
        "batch_size",
        "steps",
        "lr",
        "momentum",
        "weight_decay",
        "seed",
        "hidden_size",
        "layers",
        "seq_len",
        "eval_seq_len",
        "gain_init",
        "eval_every",
        mode="before",
    )
    @classmethod
    def _numbers(cls, value: Any) -> Any:
        return refuse_bool(value)

    @model_validator(mode="after")
    def _check_combinations(self, info: ValidationInfo) -> RunSpec:
        if info.context and info.context.get("stored"):
            return self  # read back as stored: judged when it was submitted, perhaps by another catalog
        problems = combination_problems(self)
        if problems:
            fields = sorted({f for f, _ in problems})
            raise PydanticCustomError(
                "spec_combination",
                "{message}",
                {"message": " ".join(m for _, m in problems), "fields": fields},
            )
        return self

    def resolved(self) -> RunSpec:
        """A copy with every task default filled in: the spec a run stores and reproduces from."""
        if self.task == WATCHED_TASK:
            return self
        task = TASKS[self.task]
        updates: dict[str, Any] = {}
        for name in ("steps", "lr", "hidden_size", "layers"):
            if getattr(self, name) is None:
                updates[name] = getattr(task, name)
        if self.probes.power_iterations is None:
            updates["probes"] = self.probes.model_copy(update={"power_iterations": warm_vectors(task.kind)})
        if task.kind == "sequence":
            if self.cell is None:
                updates["cell"] = "lstm"
            if self.seq_len is None:
                updates["seq_len"] = task.seq_len
            seq_len = updates.get("seq_len", self.seq_len)
            if self.eval_seq_len is None:
                updates["eval_seq_len"] = seq_len
        return self.model_copy(update=updates)

    @classmethod
    def field_ranges(cls) -> dict[str, Any]:
        """JSON-schema description of every field (type, range, default, description) for forms."""
        schema = cls.model_json_schema()
        props: dict[str, Any] = schema["properties"]
        props["probes"] = ProbeSpec.model_json_schema()["properties"]
        return props


def combination_problems(spec: RunSpec) -> list[tuple[str, str]]:
    """(field, message) for each combination of fields that cannot be trained."""
    if spec.task == WATCHED_TASK:
        return []  # described by the watched script, not trained here (submitting one: backend.limits)
    task = TASKS[spec.task]
    out: list[tuple[str, str]] = []
    if spec.norm not in NORMS:
        out.append(("norm", f"Unknown normalizer '{spec.norm}'; the normalizers are {', '.join(NORMS)}."))
    elif spec.norm not in task.norms:
        out.append(
            (
                "norm",
                f"Task '{spec.task}' does not support norm '{spec.norm}'; choose one of "
                f"{', '.join(task.norms)}.",
            )
        )
    if spec.norm == "batch" and spec.batch_size < 2:
        out.append(
            (
                "batch_size",
                f"BatchNorm needs batch size ≥ 2 (got {spec.batch_size}): its statistics "
                "come from the mini-batch. Use norm 'layer' for online learning, or raise "
                "batch_size.",
            )
        )
    steps = spec.steps if spec.steps is not None else task.steps  # what resolved() will store
    if spec.parent is not None and steps <= spec.parent.step:
        out.append(
            (
                "steps",
                f"A fork from step {spec.parent.step} must train past it: set steps above "
                f"{spec.parent.step} (got {steps}).",
            )
        )
    if spec.interventions and [i.step for i in spec.interventions] != sorted(
        i.step for i in spec.interventions
    ):
        out.append(("interventions", "List the interventions in the order of their steps."))
    if spec.bn_variance != "biased" and spec.norm != "batch":
        out.append(
            ("bn_variance", "bn_variance applies to norm 'batch' only; remove it or use norm 'batch'.")
        )
    if spec.weight_standardization and (task.kind != "image" or spec.norm in ("none", "weight")):
        out.append(
            (
                "weight_standardization",
                "Weight Standardization reparametrises a ConvNet's conv filters and goes with a normalizer "
                "after the conv: use an image task ("
                + ", ".join(n for n, t in TASKS.items() if t.kind == "image")
                + ") with norm batch, layer, rms or group, or remove weight_standardization.",
            )
        )
    if spec.ln_position != "pre" and spec.task not in TRANSFORMER_TASKS:
        out.append(
            (
                "ln_position",
                f"ln_position '{spec.ln_position}' places the LayerNorm of a Transformer block; task "
                f"'{spec.task}' has no Transformer. Use task {', '.join(TRANSFORMER_TASKS)}, or remove "
                "ln_position.",
            )
        )
    if task.kind != "sequence":
        if spec.cell is not None:
            out.append(
                (
                    "cell",
                    f"Task '{spec.task}' is not sequential, so it has no recurrent cell; remove "
                    f"cell or pick a sequential task ({', '.join(_sequential())}).",
                )
            )
        for name in ("seq_len", "eval_seq_len"):
            if getattr(spec, name) is not None:
                out.append((name, f"Task '{spec.task}' is not sequential; remove {name}."))
        if spec.ln_placement != "full":
            out.append(("ln_placement", "ln_placement 'cell' applies only to an LSTM; use 'full'."))
    else:
        cell = spec.cell or "lstm"
        if cell not in task.cells:
            out.append(("cell", f"Task '{spec.task}' supports cells {', '.join(task.cells)}."))
        lo, hi = task.seq_len_range or (1, 5000)
        seq_len = spec.seq_len if spec.seq_len is not None else task.seq_len
        if spec.seq_len is not None and not lo <= spec.seq_len <= hi:
            if lo == hi:
                out.append(
                    ("seq_len", f"Task '{spec.task}' has a fixed sequence length of {lo}; remove seq_len.")
                )
            else:
                out.append(
                    (
                        "seq_len",
                        f"Task '{spec.task}' takes seq_len between {lo} and {hi} (got {spec.seq_len}).",
                    )
                )
        if spec.eval_seq_len is not None:
            if not task.eval_longer and spec.eval_seq_len != seq_len:
                out.append(
                    (
                        "eval_seq_len",
                        f"Task '{spec.task}' cannot be evaluated at another length; remove eval_seq_len.",
                    )
                )
            elif seq_len is not None and spec.eval_seq_len < seq_len:
                out.append(
                    (
                        "eval_seq_len",
                        f"eval_seq_len ({spec.eval_seq_len}) must be at least seq_len ({seq_len}).",
                    )
                )
        if spec.ln_placement == "cell" and not (spec.norm == "layer" and cell == "lstm"):
            out.append(
                (
                    "ln_placement",
                    "ln_placement 'cell' (eq. 29) means LayerNorm on c_t of an LSTM: "
                    "use it with norm 'layer' and cell 'lstm', or set it to 'full'.",
                )
            )
    return out


def _sequential() -> list[str]:
    return [n for n, t in TASKS.items() if t.kind == "sequence"]
