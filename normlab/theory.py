"""Theory lines drawn on a run's charts, as pure functions of the run's own numbers (torch-free).

- Edge of stability (Cohen et al. 2021): gradient descent on a quadratic of curvature λ is stable iff
  λ < 2/η, so λ_max is drawn against 2/η (η·λ_max against 2).
- Norm growth of a scale-invariant weight set (§5.2.2): its gradient is orthogonal to w, so a plain SGD
  step without weight decay gives ‖w_{t+1}‖² = ‖w_t‖² + η²‖g_t‖² exactly; the norm only grows and the
  effective learning rate η/‖w‖² only falls.
  One probe step checks it: ‖w_{t+1}‖ measured against √(‖w_t‖² + η²‖g_t‖²) from the same step's ‖w_t‖,
  ‖g_t‖ and η (`growth_step`, `growth_departs`).
- Along w, a scale-invariant set's loss is flat: the curvature uᵀFu along u = w/‖w‖ is 0
  (`curvature_departs` says when a measured value is not, relative to the set's whole trace).
- Spherical equilibrium (van Laarhoven 2017; Wan et al. 2021): with weight decay λ the norm settles where
  the decay's shrinkage (≈ 2ηλ‖w‖²) balances the gradient's growth (η²‖g‖²), so the angular update
  η‖g‖/‖w‖ tends to √(2ηλ) — √(2ηλ/(1+μ)) with heavy-ball momentum μ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def stability_threshold(lr: float) -> float:
    """2/η: the largest curvature gradient descent at step η can follow without diverging."""
    if lr <= 0:
        raise ValueError("the learning rate must be positive")
    return 2.0 / lr


def effective_lr(lr: float, weight_norm: float) -> float:
    """η/‖w‖²: the step a scale-invariant set's direction takes per unit of its normalized gradient."""
    return lr / weight_norm**2


def norm_growth(norm_sq: float, lr: float, grad_norms: Sequence[float]) -> list[float]:
    """‖w_t‖² for t = 0…len(grad_norms) from ‖w_0‖² and each step's ‖g_t‖ (plain SGD, no weight decay)."""
    out = [float(norm_sq)]
    for g in grad_norms:
        out.append(out[-1] + lr * lr * g * g)
    return out


def angular_equilibrium(lr: float, weight_decay: float, momentum: float = 0.0) -> float:
    """√(2ηλ/(1+μ)): the angular update per step a scale-invariant set settles at under weight decay."""
    if lr <= 0 or weight_decay < 0 or not 0 <= momentum < 1:
        raise ValueError("need η > 0, λ ≥ 0 and 0 ≤ μ < 1")
    return math.sqrt(2.0 * lr * weight_decay / (1.0 + momentum))


def departs(
    observed: Sequence[float | None], predicted: Sequence[float | None], rel: float = 0.1
) -> list[bool]:
    """Per point, whether the run departs from the line by more than `rel` of it (shaded on the chart)."""
    return [
        o is not None and p is not None and abs(o - p) > rel * abs(p)
        for o, p in zip(observed, predicted, strict=True)
    ]


def growth_step(norm: float, grad_norm: float, lr: float) -> float:
    """‖w_{t+1}‖ after one plain SGD step (no weight decay, no momentum) of a scale-invariant set:
    √(‖w_t‖² + η²‖g_t‖²)."""
    return math.sqrt(norm * norm + lr * lr * grad_norm * grad_norm)


def growth_departs(
    norm: float, next_norm: float, grad_norm: float, lr: float, rel: float = 0.1, floor: float = 1e-5
) -> bool:
    """Whether one step's measured growth ‖w_{t+1}‖² − ‖w_t‖² departs from the law's η²‖g_t‖² by more than
    `rel` of it and by more than `floor`·‖w_t‖² (the growth is a difference of two squared norms measured
    in float32, so below that it is rounding, not a departure)."""
    measured = next_norm * next_norm - norm * norm
    predicted = lr * lr * grad_norm * grad_norm
    return abs(measured - predicted) > max(rel * predicted, floor * norm * norm)


def curvature_departs(along_w: float, trace: float, rel: float = 1e-3) -> bool:
    """Whether uᵀFu along a scale-invariant set's own direction departs from 0: |uᵀFu| above `rel` of
    the set's Fisher trace (the sum of the curvature over all its directions)."""
    return abs(along_w) > rel * abs(trace)
