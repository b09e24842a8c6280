"""A forked run's start: its parent's checkpoint loaded into the child's freshly built model, optimizer,
batch stream and generators, with the fork's changes applied and every mapping said in the log.

Parameters that exist on both sides with the same shape are kept. Between weight normalization
(w = g·v/‖v‖ per row) and the others the weights map so that w is unchanged: v = w, g = ‖w‖, and back
w = g·v/‖v‖; a layer bias maps to weight norm's `b` and back. A new normalizer's gain starts at 1 and
its bias at 0; BatchNorm's running statistics are kept only when both sides use BatchNorm. The
optimizer's state is kept when the optimizer and the parameter set are unchanged, else reset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from normlab_client.spec import RunSpec
from workers.engine.checkpoint import LoopState, restore_rngs
from workers.engine.tasks.base import BatchStream

BN_BUFFERS = ("running_mean", "running_var", "trained_steps")
KNOBS = ("lr", "momentum", "weight_decay")  # optimizer settings a fork may change in place


def _row_norms(w: torch.Tensor) -> torch.Tensor:
    return w.reshape(w.shape[0], -1).norm(dim=1)


def map_parameters(saved: dict[str, torch.Tensor], model: nn.Module, same_norm: bool) -> dict[str, list[str]]:
    """Load `saved` (the parent's state dict) into `model` as the module docstring says; returns the
    names kept, mapped, started fresh and dropped."""
    target = model.state_dict()
    if same_norm:
        model.load_state_dict(saved)
        return {"kept": list(target), "mapped": [], "fresh": [], "dropped": []}
    new: dict[str, torch.Tensor] = {}
    mapped, fresh = [], []
    used: set[str] = set()
    for key, value in target.items():
        prefix, _, leaf = key.rpartition(".")
        if key in saved and saved[key].shape == value.shape and leaf not in BN_BUFFERS:
            new[key] = saved[key]
            used.add(key)
        elif leaf == "v" and f"{prefix}.weight" in saved:  # into weight norm: v = w
            new[key] = saved[f"{prefix}.weight"].clone()
            used.add(f"{prefix}.weight")
            mapped.append(f"{prefix}.weight → {key}")
        elif leaf == "g" and f"{prefix}.weight" in saved:  # g = ‖w‖ per row, so g·v/‖v‖ = w
            new[key] = _row_norms(saved[f"{prefix}.weight"]).reshape(value.shape)
            mapped.append(f"‖{prefix}.weight‖ → {key}")
        elif leaf == "b" and f"{prefix}.bias" in saved:
            new[key] = saved[f"{prefix}.bias"].clone()
            used.add(f"{prefix}.bias")
            mapped.append(f"{prefix}.bias → {key}")
        elif leaf == "weight" and f"{prefix}.v" in saved and f"{prefix}.g" in saved:  # out of weight norm
            v, g = saved[f"{prefix}.v"], saved[f"{prefix}.g"]
            shape = (-1,) + (1,) * (v.dim() - 1)
            new[key] = v * (g.reshape(-1) / _row_norms(v)).reshape(shape)
            used.update((f"{prefix}.v", f"{prefix}.g"))
            mapped.append(f"{prefix}.g·v/‖v‖ → {key}")
        elif leaf == "bias" and f"{prefix}.b" in saved and saved[f"{prefix}.b"].shape == value.shape:
            new[key] = saved[f"{prefix}.b"].clone()
            used.add(f"{prefix}.b")
            mapped.append(f"{prefix}.b → {key}")
        else:
            if leaf == "gain":
                new[key] = torch.ones_like(value)
            elif leaf == "bias" and prefix.endswith("norm") or leaf == "norm_bias":
                new[key] = torch.zeros_like(value)
            else:
                new[key] = value
            fresh.append(key)
    model.load_state_dict(new)
    dropped = [k for k in saved if k not in used]
    return {"kept": sorted(used & set(target)), "mapped": mapped, "fresh": fresh, "dropped": dropped}


def _short(names: list[str], most: int = 6) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def start_child(
    spec: RunSpec,
    state: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    stream: BatchStream,
    prober,
    log: Callable[[str], None],
) -> LoopState:
    """Put the parent's checkpoint `state` into the child's parts; returns where the loop continues."""
    parent = RunSpec.model_validate_json(state["spec"])
    loop = LoopState(**state["loop"])
    step = loop.step
    same_norm = parent.norm == spec.norm
    names = map_parameters(state["model"], model, same_norm)
    if not same_norm:
        log(
            f"Forked at step {step} from norm '{parent.norm}' to '{spec.norm}': kept "
            f"{len(names['kept'])} tensors; mapped {_short(names['mapped']) or 'none'}; new (gains 1, "
            f"biases 0): {_short(names['fresh']) or 'none'}; dropped: {_short(names['dropped']) or 'none'}."
        )
    named = dict(model.named_parameters())
    for name in state.get("frozen", []):
        if name in named:
            named[name].requires_grad_(False)
    if parent.optimizer == spec.optimizer and same_norm:
        optimizer.load_state_dict(state["optimizer"])
        for knob in KNOBS:
            if getattr(parent, knob) != getattr(spec, knob):
                for group in optimizer.param_groups:
                    group[knob] = getattr(spec, knob)
    else:
        why = "the optimizer changed" if parent.optimizer != spec.optimizer else "the parameter set changed"
        log(f"The optimizer's state was reset at the fork ({why}); it starts fresh from step {step + 1}.")
    if parent.seed == spec.seed:
        stream.load_state_dict(state["data"])
        restore_rngs(state, prober if parent.probes == spec.probes else None)
    else:
        log(f"The data order from step {step + 1} on follows seed {spec.seed} (the parent's: {parent.seed}).")
    if parent.batch_size != spec.batch_size:
        log(f"Batch size {parent.batch_size} → {spec.batch_size} from step {step + 1}, same data order.")
    return loop
