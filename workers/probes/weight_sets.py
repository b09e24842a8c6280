"""Scale-invariant weight sets (§5.2.2) and their Fisher geometry: ‖w‖, uᵀFu, tr F_ww, η/‖w‖², …

A weight set is a set of weights whose joint rescaling leaves the network's function unchanged:
a whole LN- (or RMS-) normalized weight matrix, one row of a BN-normalized weight, one row of a
WeightNorm `v`. For such a set u = w/‖w‖ satisfies Ju = 0, so uᵀFu = 0 (the built-in sanity check),
tr F_ww scales as 1/‖w‖² (hence ‖w‖²·tr F_ww is rescale-invariant) and plain SGD grows ‖w‖ (the
gradient is orthogonal to w), shrinking the effective learning rate η/‖w‖². Un-normalized weight
matrices are reported the same way for comparison (there uᵀFu is not 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from workers.probes.persample import RowStats, rows

_ROW_NORMS = ("BatchNorm",)  # normalizers with statistics per unit (over the batch): one set per row
_MATRIX_NORMS = ("LayerNorm", "RMSNorm")  # statistics over the layer: the whole matrix is one set


@dataclass
class WeightSet:
    """Where a set's weights live and how they are normalized."""

    name: str  # parameter name, e.g. "layers.0.weight"
    param: str  # key into named_parameters
    normalizer: str  # layer | batch | rms | weight | none
    by_row: bool  # one set per row (aggregated in payloads) or the whole matrix
    scale_invariant: bool
    gain: str | None  # parameter name of the matching gain (per row), if any


def find_weight_sets(model: nn.Module) -> list[WeightSet]:
    """Every normalized (and, for comparison, un-normalized) linear weight of the model, as sets."""
    out: list[WeightSet] = []
    for name, m in model.named_modules():
        prefix = f"{name}." if name else ""
        kind = type(m).__name__
        if kind == "WeightNormLinear":
            out.append(WeightSet(f"{prefix}v", f"{prefix}v", "weight", True, True, f"{prefix}g"))
        elif kind == "NormLinear":
            norm = type(m.norm).__name__
            gain = f"{prefix}norm.gain" if hasattr(m.norm, "gain") else None
            if norm in _MATRIX_NORMS:
                label = "layer" if norm == "LayerNorm" else "rms"
                out.append(WeightSet(f"{prefix}weight", f"{prefix}weight", label, False, True, gain))
            elif norm in _ROW_NORMS:
                out.append(WeightSet(f"{prefix}weight", f"{prefix}weight", "batch", True, True, gain))
        elif isinstance(m, nn.Linear):
            out.append(WeightSet(f"{prefix}weight", f"{prefix}weight", "none", False, False, None))
    return out


def row_quantities(stats: RowStats, param: Tensor, scale: float, row: int | None = None) -> dict[str, float]:
    """Fisher geometry of one row (row=i) or of the whole matrix (row=None: the payload's own
    `_matrix_quantities`), from RowStats (× scale = 1/N)."""
    if row is None:
        whole = _matrix_quantities(stats, param, None, scale, with_grad=False)
        return {k: whole[k] for k in ("weight_norm", "along_w_curvature", "trace_ww", "scaled_trace_ww")}
    w = rows(param.detach())
    sq = float(w[row].pow(2).sum())
    trace = scale * float(stats.row_sq[row])
    along = scale * float(stats.row_dot_sq[row]) / sq if sq > 0 else math.nan
    return {
        "weight_norm": math.sqrt(sq),
        "along_w_curvature": along,
        "trace_ww": trace,
        "scaled_trace_ww": sq * trace,
    }


def _matrix_quantities(
    stats: RowStats, param: Tensor, gain_stats: RowStats | None, scale: float, with_grad: bool = True
) -> dict:
    """A whole matrix's Fisher geometry, its gain's curvature and (with_grad) its gradient's norm and
    component along w, with one read-back for all of them (seven before, each a synchronisation)."""
    flat = param.detach().reshape(-1)
    parts = [torch.dot(flat, flat), stats.row_sq.sum(), stats.whole_dot_sq.reshape(())]
    if gain_stats is not None:
        parts.append(gain_stats.row_sq.sum())
    grad = param.grad if with_grad else None
    with_grad = grad is not None
    if grad is not None:
        g = grad.detach().reshape(-1)
        parts += [torch.dot(g, g), torch.dot(g, flat)]
    values = torch.stack(parts).tolist()
    sq, row_sq, whole = values[:3]
    trace = scale * row_sq
    out = {
        "weight_norm": math.sqrt(sq),
        "along_w_curvature": scale * whole / sq if sq > 0 else math.nan,
        "trace_ww": trace,
        "scaled_trace_ww": sq * trace,
        "gain_curvature": scale * values[3] if gain_stats is not None else None,
    }
    if with_grad:
        gg, gw = values[-2:]
        out["grad_norm"] = math.sqrt(max(gg, 0.0))
        out["grad_along_w"] = gw / out["weight_norm"]
    return out


def _per_row(stats: RowStats, w: Tensor, grad: Tensor | None, scale: float) -> dict[str, Tensor]:
    sq = w.pow(2).sum(1)
    out = {
        "weight_norm": sq.sqrt(),
        "trace_ww": scale * stats.row_sq,
        "along_w_curvature": scale * stats.row_dot_sq / sq.clamp_min(1e-30),
    }
    out["scaled_trace_ww"] = sq * out["trace_ww"]
    if grad is not None:
        g = rows(grad)
        out["grad_norm"] = g.norm(dim=1)
        out["grad_along_w"] = (g * w).sum(1) / sq.sqrt().clamp_min(1e-30)
    return out


def weight_set_payload(
    weight_set: WeightSet,
    params: Mapping[str, Tensor],
    stats: dict[str, RowStats],
    estimators: dict[str, str],
    scale: float,
    lr: float,
) -> dict:
    """One payload entry: a whole-matrix set, or a layer's row sets summarized (median; uᵀFu: max)."""
    p = params[weight_set.param]
    w = rows(p.detach())
    st = stats[weight_set.param]
    gain_stats = stats.get(weight_set.gain) if weight_set.gain else None
    entry: dict = {
        "name": weight_set.name,
        "normalizer": weight_set.normalizer,
        "scale_invariant": weight_set.scale_invariant,
        "kind": "row" if weight_set.by_row else "matrix",
        "rows": int(w.shape[0]),
        "estimator": estimators.get(weight_set.param, "summed-gradient"),
    }
    if not weight_set.by_row:
        entry.update(_matrix_quantities(st, p, gain_stats, scale))
        entry["effective_lr"] = lr / entry["weight_norm"] ** 2
        return entry
    per = _per_row(st, w, p.grad.detach() if p.grad is not None else None, scale)
    for key, values in per.items():
        if key == "along_w_curvature":
            entry[key] = float(values.abs().max())
        elif key == "grad_along_w":
            entry[key] = float(values.abs().max())
        else:
            entry[key] = float(values.median())
    entry["gain_curvature"] = scale * float(gain_stats.row_sq.median()) if gain_stats is not None else None
    entry["effective_lr"] = float((lr / per["weight_norm"].pow(2)).median())
    entry["aggregate"] = "median over rows; along_w_curvature and grad_along_w: largest |value|"
    return entry


def snapshot(weight_sets: list[WeightSet], params: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The sets' weights now (to measure the angular update and norm growth of the next step)."""
    return {g.param: params[g.param].detach().clone() for g in weight_sets}


def add_update(
    entry: dict, weight_set: WeightSet, before: Tensor, after: Tensor, optimizer: str | None = None
) -> None:
    """The step the optimizer actually took, measured, into a payload entry: the angle between w_t and
    w_{t+1} ("angular_update", radians), the effective step ‖w_{t+1} − w_t‖ / ‖w_t‖ and ‖w_{t+1}‖ (row
    sets: medians over rows). Under Adam these, not η/‖w‖², say how fast a set's direction moves."""
    if not weight_set.by_row:
        _matrix_update(entry, before.reshape(-1), after.detach().reshape(-1))
    else:
        _row_update(entry, rows(before), rows(after.detach()))
    if optimizer is not None:
        entry["optimizer"] = optimizer


def _matrix_update(entry: dict, b: Tensor, a: Tensor) -> None:
    """`add_update` for one whole-matrix set (flat w_t, w_{t+1}): the same quantities from two dot
    products and three norms, the scalars in double precision (a third of the row form's operations)."""
    d = a - b
    bb = float(torch.dot(b, b))
    db = float(torch.dot(d, b))
    nb = math.sqrt(bb)
    perp = float(torch.add(d, b, alpha=-db / bb).norm()) if bb > 0 else 0.0  # d⊥ = d − (d·ŵ)ŵ
    entry["angular_update"] = math.atan2(perp, nb + db / max(nb, 1e-30))
    entry["effective_step"] = float(d.norm()) / max(nb, 1e-30)
    entry["weight_norm_next"] = float(a.norm())


def _row_update(entry: dict, b: Tensor, a: Tensor) -> None:
    """`add_update` for row sets: per row, then the medians."""
    # In the weights' own precision, from the update d = w_{t+1} − w_t: exact for a small step (Sterbenz),
    # so the angle keeps full relative precision however small it is (arccos of a float32 cosine rounds a
    # 1e-3 rad Adam turn to 0), as a float64 atan2 of the unit rows would at several times the cost:
    # θ = atan2(‖d⊥‖, ‖w_t‖ + d·ŵ_t), d⊥ the part of d orthogonal to w_t.
    d = a - b
    nb = b.norm(dim=1)
    unit = b / nb.clamp_min(1e-30).unsqueeze(1)
    along = (d * unit).sum(1)
    perp = (d - along.unsqueeze(1) * unit).norm(dim=1)
    angle = torch.atan2(perp, nb + along)
    step = d.norm(dim=1) / nb.clamp_min(1e-30)
    entry["angular_update"] = float(angle.median())
    entry["effective_step"] = float(step.median())
    entry["weight_norm_next"] = float(a.norm(dim=1).median())
