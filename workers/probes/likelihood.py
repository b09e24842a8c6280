"""`Likelihood`: the model's predictive distribution for a task, as the Fisher needs it.

The true Fisher of eq. 8 is F = (1/N) Σ_k J_kᵀ Λ_k J_k over the N scored predictions k of a batch, where
J_k is the Jacobian of prediction k's outputs with respect to the parameters and Λ_k the covariance of
the score with respect to those outputs: diag(p) − ppᵀ for a softmax (equal to the Gauss–Newton matrix),
the identity for the adding task's unit-variance Gaussian. A *residual* r_k = ∂(−log p(ŷ_k))/∂o_k with
ŷ_k sampled from the model has E[r rᵀ] = Λ_k, so back-propagating sampled residuals gives unbiased
Monte-Carlo Fisher estimates without ever forming labels in the task's target shape.

The scored predictions follow the task's own loss (workers/engine/tasks/base.py): per-case targets read
a sequence model's last step; per-step targets skip IGNORE steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE = -100  # the tasks' per-step "not scored" target (cross_entropy's ignore_index)


class Likelihood:
    """Selects the scored predictions of a batch and knows their distribution (softmax or Gaussian)."""

    TARGETS = ("class", "per_step_class", "regression")  # a mixture density ("density") is not modelled

    def __init__(self, target: str):
        if target not in self.TARGETS:
            raise ValueError(f"unknown target kind {target!r}")
        self.target = target
        self.gaussian = target == "regression"

    def select(self, outputs: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(predictions (N, C) still attached to the graph, their targets (N,), case index (N,))."""
        out = outputs
        if self.target != "per_step_class" and out.dim() == 3:
            out = out[:, -1]
        batch = out.shape[0]
        if self.target == "per_step_class":
            steps = out.shape[1]
            case = torch.arange(batch, device=out.device).repeat_interleave(steps)
            flat, tgt = out.reshape(-1, out.shape[-1]), y.reshape(-1)
            keep = tgt != IGNORE
            return flat[keep], tgt[keep], case[keep]
        case = torch.arange(batch, device=out.device)
        if self.gaussian:
            return out.reshape(batch, -1), y.reshape(batch, -1).to(out.dtype), case
        return out, y, case

    def mean_nll(self, pred: Tensor, tgt: Tensor) -> Tensor:
        """Mean negative log-likelihood (unit-variance Gaussian: ½(o − y)², up to a constant)."""
        if self.gaussian:
            return 0.5 * (pred - tgt).pow(2).sum(-1).mean()
        return F.cross_entropy(pred, tgt)

    def task_loss_ratio(self) -> float:
        """Task loss ÷ mean NLL on the same labels (the adding task's MSE is twice the Gaussian NLL)."""
        return 2.0 if self.gaussian else 1.0

    @torch.no_grad()
    def sampled_residual(
        self, pred: Tensor, generator: torch.Generator | None, probs: Tensor | None = None
    ) -> Tensor:
        """∂(−log p(ŷ))/∂o with ŷ drawn from the model: covariance Λ, the true-Fisher's residual
        (`probs`: the softmax of pred, when the caller keeps it)."""
        if self.gaussian:
            return -torch.randn(pred.shape, generator=generator, dtype=pred.dtype, device=pred.device)
        p = torch.softmax(pred.detach(), -1) if probs is None else probs
        draw = torch.multinomial(p.float(), 1, generator=generator).squeeze(-1)
        return p - F.one_hot(draw, p.shape[-1]).to(p.dtype)

    @torch.no_grad()
    def observed_residual(self, pred: Tensor, tgt: Tensor) -> Tensor:
        """The same residual at the observed labels: the *empirical* Fisher's (not a curvature)."""
        if self.gaussian:
            return pred.detach() - tgt
        p = torch.softmax(pred.detach(), -1)
        return p - F.one_hot(tgt, p.shape[-1]).to(p.dtype)

    @torch.no_grad()
    def lam(self, pred: Tensor, v: Tensor, probs: Tensor | None = None) -> Tensor:
        """Λ v for each prediction: (diag p − ppᵀ) v for a softmax, v for the unit-variance Gaussian
        (`probs`: the softmax of pred, when the caller keeps it)."""
        if self.gaussian:
            return v
        p = torch.softmax(pred.detach(), -1) if probs is None else probs
        pv = p * v
        return pv.sub_(p * pv.sum(-1, keepdim=True))

    @torch.no_grad()
    def probabilities(self, pred: Tensor) -> Tensor:
        return torch.softmax(pred.detach(), -1)
