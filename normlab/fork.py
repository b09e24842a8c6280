"""What a fork may change, and the child's spec: the parent's spec with the changes, starting after a
step of the parent (from its checkpoint there, or an earlier one replayed up to it). Torch-free: the API
and the CLI check a fork here before anything is queued."""

from __future__ import annotations

from typing import Any

from normlab_client.spec import ParentRef, RunSpec

# Fields a child may change: the optimizer's knobs, the data's order and batch size, the normalizer
# (parameters are mapped, workers/engine/fork.py), how long and what is measured.
CHANGEABLE = (
    "norm",
    "lr",
    "optimizer",
    "momentum",
    "weight_decay",
    "batch_size",
    "steps",
    "seed",
    "probes",
    "eval_every",
    "checkpoint_every",
    "device",
    "bn_variance",
)
# Fields that define the model's shape or its data: a checkpoint of one cannot continue as the other.
REFUSED = {
    "task": "a checkpoint's model was trained on its own task's inputs and outputs",
    "cell": "another recurrent cell has other weights",
    "hidden_size": "the weights' shapes follow the hidden size",
    "layers": "the weights' shapes follow the number of layers",
    "seq_len": "the data stream and recurrent BatchNorm's statistics follow the sequence length",
    "eval_seq_len": "the validation data follow it",
    "ln_placement": "another LayerNorm placement has other parameters",
    "weight_standardization": "the filters were trained as they are used (standardized or not)",
    "ln_position": "a pre-LN Transformer has a final LayerNorm a post-LN one lacks",
    "gain_init": "the gains already have their values at the fork (a new normalizer's gain starts at 1)",
    "parent": "the parent is the run being forked",
    "interventions": "interventions apply to a running run: POST /api/runs/{id}/interventions",
}


class ForkRefused(ValueError):
    """A change a fork cannot make: the message says why, `fields` names them."""

    def __init__(self, message: str, fields: dict[str, str]):
        super().__init__(message)
        self.fields = fields


def refused_changes(changes: dict[str, Any]) -> dict[str, str]:
    """{field: why} for each change a fork cannot make."""
    out: dict[str, str] = {}
    for name in changes:
        if name in REFUSED:
            out[name] = f"{name} cannot change in a fork: {REFUSED[name]}; start a new run instead."
        elif name not in CHANGEABLE:
            out[name] = f"Unknown field {name!r}; a fork may change {', '.join(CHANGEABLE)}."
    return out


def child_spec(
    parent: RunSpec, parent_id: str, step: int, changes: dict[str, Any], checkpoint: int | None = None
) -> RunSpec:
    """The child's spec: `parent` with `changes`, continuing after the parent's step `step`, from its
    checkpoint of step `checkpoint` (default `step`; an earlier one is replayed up to `step` with the
    parent's interventions in between). Raises ForkRefused (fields a fork cannot change) or pydantic's
    ValidationError (a bad value)."""
    refused = refused_changes(changes)
    if refused:
        raise ForkRefused(" ".join(refused.values()), refused)
    base = parent.model_dump(exclude={"parent", "interventions"})
    if "probes" in changes and isinstance(changes["probes"], dict):
        changes = {**changes, "probes": {**base["probes"], **changes["probes"]}}
    if "checkpoint_every" not in changes and "steps" in changes:
        base["checkpoint_every"] = None  # about 10 over the child's own length
    ref = ParentRef(id=parent_id, step=step)
    if checkpoint is not None and checkpoint != step:
        replay = [i for i in parent.interventions if checkpoint < i.step <= step]
        ref = ParentRef(id=parent_id, step=step, checkpoint=checkpoint, replay=replay)
    return RunSpec(**{**base, **changes, "parent": ref}).resolved()
