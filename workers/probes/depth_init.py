"""Depth at initialisation (Daneshmand et al. 2020, "rank collapse"): what a deep ReLU net does to a batch
before any training, with and without normalization.

Without normalization the representations of a batch grow alike with depth: the effective rank of the
batch's hidden matrix H_l (batch × width) falls towards 1. BatchNorm centres each unit over the batch,
which keeps the cases apart, so the rank stays high. LayerNorm centres each case over its units and does
not keep them apart. The gradient norm ‖∂ℓ/∂h_l‖ per layer shows how the backward pass scales with depth.
Runs in seconds on a CPU: it is one forward and one backward pass, with no training.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

NORMS = ("none", "batch", "layer")


def effective_rank(h: Tensor) -> float:
    """exp of the entropy of the normalized singular values of `h` (Roy & Vetterli 2007): k for a matrix
    with k equal singular values and the rest 0."""
    s = torch.linalg.svdvals(h.double())
    p = s / s.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def _norm(norm: str, width: int) -> nn.Module:
    if norm == "batch":
        return nn.BatchNorm1d(width)
    if norm == "layer":
        return nn.LayerNorm(width)
    if norm == "none":
        return nn.Identity()
    raise ValueError(f"norm {norm!r}: choose one of {', '.join(NORMS)}")


def depth_profile(norm: str, depth: int = 50, width: int = 128, batch: int = 64, seed: int = 0) -> dict:
    """Per layer l = 1…depth, at initialisation: {"effective_rank": rank of H_l, "grad_norm": ‖∂ℓ/∂H_l‖}
    for a ReLU MLP (Linear without bias → norm → ReLU, He-initialised) on a Gaussian batch, where ℓ is
    the mean squared error of a linear read-out against Gaussian targets."""
    gen = torch.Generator().manual_seed(seed)
    layers = []
    for _ in range(depth):
        lin = nn.Linear(width, width, bias=False)
        with torch.no_grad():
            lin.weight.copy_(
                torch.randn(width, width, generator=gen, dtype=torch.float64) * (2.0 / width) ** 0.5
            )
        layers.append((lin.double(), _norm(norm, width).double().train()))
    x = torch.randn(batch, width, generator=gen, dtype=torch.float64)
    readout = torch.randn(width, 1, generator=gen, dtype=torch.float64) / width**0.5
    target = torch.randn(batch, 1, generator=gen, dtype=torch.float64)
    hidden = []
    h = x
    for lin, nrm in layers:
        h = torch.relu(nrm(lin(h)))
        h.retain_grad()
        hidden.append(h)
    loss = ((h @ readout - target) ** 2).mean()
    loss.backward()
    return {
        "norm": norm,
        "input_rank": effective_rank(x),
        "effective_rank": [effective_rank(t.detach()) for t in hidden],
        "grad_norm": [float(t.grad.norm()) if t.grad is not None else 0.0 for t in hidden],
    }
