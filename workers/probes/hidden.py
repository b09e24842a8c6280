"""`hidden` payloads from the ordinary training step: per-time-step norms (§3.1) or per-layer statistics.

The model records during the step's own forward pass (``model.capture = True``); after backward the
retained hidden states hold ∂L/∂h_t, so nothing is recomputed.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

MAX_POINTS = 512  # longest per-time-step series sent; longer sequences are strided evenly


def _per_case_norm(t: Tensor) -> float:
    return float(t.detach().float().flatten(1).norm(dim=1).mean())


def _series(captured: dict, key: str, idx: list[int]) -> list[float]:
    return captured[key].detach().float()[idx].tolist()


def _time_index(steps: int) -> list[int]:
    """The time steps a series sends: all of them, or at most ≈ MAX_POINTS evenly strided, the last kept."""
    stride = max(1, math.ceil(steps / MAX_POINTS))
    idx = list(range(0, steps, stride))
    if idx[-1] != steps - 1:
        idx.append(steps - 1)
    return idx


def _with_index(out: dict, idx: list[int]) -> dict:
    if len(idx) < out["time_steps"]:  # strided: say which time steps the series hold
        out["time_index"] = idx
    return out


def sequence_payload(captured: dict) -> dict:
    """`recurrent_payload` from a one-node recurrence's (T,) series (see workers.engine.recurrent)."""
    steps = int(captured["h_norms"].shape[0])
    idx = _time_index(steps)
    out = {
        "time_steps": steps,
        "hidden_norms": _series(captured, "h_norms", idx),
        "summed_mean": _series(captured, "summed_mean", idx),
        "summed_std": _series(captured, "summed_std", idx),
        "grad_norms": _series(captured, "grad_norms", idx) if "grad_norms" in captured else [0.0] * len(idx),
        "cell_norms": _series(captured, "c_norms", idx),
    }
    return _with_index(out, idx)


def recurrent_payload(captured: dict) -> dict:
    """{"hidden_norms", "cell_norms" (LSTM), "summed_mean", "summed_std", "grad_norms", "time_steps"}.

    Each series is per time step, averaged over the batch: ‖h_t‖, ‖c_t‖, the summed inputs' mean μ_t and
    standard deviation σ_t before normalization, and ‖∂ℓ/∂h_t‖ for one case's loss ℓ (the training loss
    is a batch mean, so its gradient per case is scaled back by B)."""
    hs: list[Tensor] = captured["h"]
    steps = len(hs)
    idx = _time_index(steps)
    batch = hs[0].shape[0]
    out = {
        "time_steps": steps,
        "hidden_norms": [_per_case_norm(hs[t]) for t in idx],
        "summed_mean": _series(captured, "summed_mean", idx),
        "summed_std": _series(captured, "summed_std", idx),
        "grad_norms": [batch * _per_case_norm(g) if (g := hs[t].grad) is not None else 0.0 for t in idx],
    }
    if "c" in captured:
        out["cell_norms"] = [_per_case_norm(captured["c"][t]) for t in idx]
    return _with_index(out, idx)


def _summary(values: Tensor) -> dict[str, float]:
    v = values.detach().float()
    return {"min": float(v.min()), "median": float(v.median()), "max": float(v.max())}


def _layer_modules(model: nn.Module) -> list[nn.Module]:
    """The hidden layers in the order the model records them (MLP `hidden`, ConvNet `convs`)."""
    for attr in ("hidden", "convs"):
        layers = getattr(model, attr, None)
        if isinstance(layers, nn.ModuleList):
            return list(layers)
    return []


def layer_weights(layer: nn.Module) -> tuple[Tensor | None, Tensor | None]:
    """(incoming weight rows before normalization — `weight`, or WeightNorm's `v`; the gain or None)."""
    weight = getattr(layer, "v", None)
    if weight is None:
        weight = getattr(layer, "weight", None)
    gain = getattr(layer, "g", None)
    norm = getattr(layer, "norm", None)
    if gain is None and norm is not None:
        gain = getattr(norm, "gain", None)
    return weight, gain


def feedforward_payload(captured: dict, model: nn.Module) -> dict:
    """{"layers": [{"name", "summed_mean", "summed_std", "act_norm", "weight_row_norms", "gain"}]}."""
    modules = _layer_modules(model)
    layers = []
    for k, rec in enumerate(captured.get("layers", [])):
        entry = {key: rec[key] for key in ("name", "summed_mean", "summed_std", "act_norm")}
        weight, gain = layer_weights(modules[k]) if k < len(modules) else (None, None)
        entry["weight_row_norms"] = (
            _summary(weight.detach().flatten(1).norm(dim=1)) if weight is not None else None
        )
        entry["gain"] = _summary(gain) if gain is not None else None
        layers.append(entry)
    return {"layers": layers}


@torch.no_grad()
def hidden_payload(model: nn.Module) -> dict | None:
    """The payload for what the model captured in this step, or None when it captured nothing."""
    captured = getattr(model, "captured", None) or {}
    if captured.get("h"):
        return recurrent_payload(captured)
    if "h_norms" in captured:
        return sequence_payload(captured)
    if captured.get("layers"):
        return feedforward_payload(captured, model)
    return None
