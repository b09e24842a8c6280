"""True-Fisher estimates on one batch: per-layer MC traces, Fisher- and Hessian-vector products.

`FisherPass(model, likelihood, x, y)` runs one extra forward pass (BatchNorm buffers and the model's
capture record are restored afterwards, parameter .grad is never touched) and offers:

- `sampled(residual)`: back-propagate a residual (sampled labels: true Fisher; observed: empirical)
  and return RowStats per parameter plus the estimator used ("per-sample" from hooks where the layer
  allows it, else "summed-gradient": ‖∇θ Σ_n log p(ŷ_n|x_n)‖²/N, unbiased but noisier);
- `fvp(v)` = F v = (1/N) Jᵀ Λ J v by two reverse passes (Jv as the derivative of a vjp, since forward
  mode is missing for some of the engine's kernels), then Λ, then a vjp;
- `hvp(v)` = ∇²L v of the task's training loss by double backward.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn

import kernels
from workers.probes.likelihood import Likelihood
from workers.probes.persample import Recorder, RowStats, row_stats, summed_stats


@contextlib.contextmanager
def _twice_differentiable(device: torch.device):
    """On CUDA: no cuDNN RNNs and the torch kernels (the Triton custom ops have no double backward)."""
    if device.type != "cuda":
        yield
        return
    previous = kernels._FORCED  # the kernels module keeps its choice in this one global
    kernels.set_backend("torch")
    try:
        with torch.backends.cudnn.flags(enabled=False):
            yield
    finally:
        kernels.set_backend(previous)


class FisherPass:
    """One batch's forward graph, kept for Monte-Carlo traces and curvature-vector products."""

    def __init__(self, model: nn.Module, likelihood: Likelihood, x: Tensor, y: Tensor,
                 loss_fn=None, use_recorder: bool = True):
        self.model, self.lik, self.y, self.loss_fn = model, likelihood, y, loss_fn
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.params = [p for p in model.parameters() if p.requires_grad]
        buffers = {n: b.clone() for n, b in model.named_buffers()}
        capture, captured = getattr(model, "capture", None), getattr(model, "captured", None)
        if capture is not None:
            model.capture = True  # the step-by-step recurrent path: twice differentiable
        self.recorder = Recorder(model, x.shape[0]) if use_recorder else None
        try:
            hooks = self.recorder or contextlib.nullcontext()
            with _twice_differentiable(x.device), torch.enable_grad(), hooks:
                self.outputs = model(x)
        finally:
            _restore_buffers(model, buffers)
            if capture is not None:
                model.capture = capture
                model.captured = captured
        self.pred, self.tgt, self.case = likelihood.select(self.outputs, y)
        self.n = int(self.pred.shape[0])
        self._u: Tensor | None = None
        self._gu: tuple | None = None
        self._hg: tuple | None = None

    def _grad(self, outputs, grad_outputs, **kw) -> list[Tensor]:
        grads = torch.autograd.grad(outputs, self.params, grad_outputs, allow_unused=True, **kw)
        return [torch.zeros_like(p) if g is None else g for p, g in zip(self.params, grads, strict=True)]

    def sampled(self, residual: Tensor) -> tuple[dict[str, RowStats], dict[str, str], list[Tensor]]:
        """(RowStats per parameter name, estimator per parameter name, the summed gradient ∇S)."""
        rec = self.recorder
        if rec is not None:
            rec.clear_grads()
            rec.recording = True
        try:
            grads = self._grad(self.pred, residual, retain_graph=True)
        finally:
            if rec is not None:
                rec.recording = False
        stats: dict[str, RowStats] = {}
        est: dict[str, str] = {}
        by_name = dict(zip(self.names, zip(self.params, grads, strict=True), strict=True))
        if rec is not None:
            mods = dict(self.model.named_modules())
            for mod_name in rec.kinds:
                per = rec.stats(mod_name, mods[mod_name])
                for attr, st in (per or {}).items():
                    full = f"{mod_name}.{attr}" if mod_name else attr
                    if full in by_name and _consistent(st, *by_name[full]):
                        stats[full], est[full] = st, "per-sample"
        for name, (p, g) in by_name.items():
            if name not in stats:
                stats[name], est[name] = summed_stats(g, p), "summed-gradient"
        return stats, est, grads

    def fvp(self, v: list[Tensor]) -> list[Tensor]:
        """F v = (1/N) Jᵀ Λ J v over this batch (J: Jacobian of the scored predictions)."""
        if self._gu is None:
            self._u = torch.zeros_like(self.pred, requires_grad=True)
            self._gu = tuple(self._grad(self.pred, self._u, retain_graph=True, create_graph=True))
        jv = torch.autograd.grad(self._gu, self._u, v, retain_graph=True, allow_unused=True)[0]
        if jv is None:
            jv = torch.zeros_like(self.pred)
        return self._grad(self.pred, self.lik.lam(self.pred, jv) / self.n, retain_graph=True)

    def hvp(self, v: list[Tensor]) -> list[Tensor]:
        """∇²L v for the task's training loss on this batch (double backward)."""
        if self._hg is None:
            loss = self.loss_fn(self.outputs, self.y)
            self._hg = tuple(self._grad(loss, None, retain_graph=True, create_graph=True))
        hv = torch.autograd.grad(self._hg, self.params, v, retain_graph=True, allow_unused=True)
        return [torch.zeros_like(p) if h is None else h.detach()
                for p, h in zip(self.params, hv, strict=True)]


def _restore_buffers(model: nn.Module, saved: dict[str, Tensor]) -> None:
    """Put back BatchNorm's running statistics: swap in the saved copies rather than write in place,
    because the forward graph still holds the buffers it read (autograd version checks)."""
    for mod_name, m in model.named_modules():
        prefix = f"{mod_name}." if mod_name else ""
        for name in list(m._buffers):
            if f"{prefix}{name}" in saved:
                m._buffers[name] = saved[f"{prefix}{name}"]


def _consistent(st: RowStats, p: Tensor, g: Tensor) -> bool:
    """Hook-based per-case terms must add up to the summed gradient (else some use escaped the hooks)."""
    want = summed_stats(g, p).dot_sum
    scale = float(want.abs().max()) + float(st.dot_sum.abs().max()) + 1e-30
    return float((st.dot_sum - want).abs().max()) <= 1e-4 * scale + 1e-12 * (1 + scale)


def power_iteration(product, init: list[Tensor], iterations: int) -> tuple[float, list[Tensor]]:
    """(Rayleigh quotient λ ≈ λ_max, eigenvector estimate) after `iterations` products from `init`."""
    v = _normalized(init)
    lam = 0.0
    for _ in range(iterations):
        w = product(v)
        lam = float(sum((a * b).sum() for a, b in zip(v, w, strict=True)))
        nrm = _norm(w)
        if nrm == 0.0:
            break
        v = [t / nrm for t in w]
    return lam, [t.detach() for t in v]


def _norm(v: list[Tensor]) -> float:
    return float(torch.sqrt(sum(t.pow(2).sum() for t in v)))


def _normalized(v: list[Tensor]) -> list[Tensor]:
    n = _norm(v)
    return [t / n for t in v] if n > 0 else v


def module_traces(stats: dict[str, RowStats], est: dict[str, str], scale: float) -> tuple[dict, dict]:
    """tr F per module (its parameters' traces added) and the estimator (summed if any part is)."""
    trace: dict[str, float] = {}
    kind: dict[str, str] = {}
    for name, st in stats.items():
        mod = name.rsplit(".", 1)[0] if "." in name else name
        trace[mod] = trace.get(mod, 0.0) + scale * float(st.row_sq.sum())
        if kind.get(mod) != "summed-gradient":
            kind[mod] = est[name]
    return trace, kind


__all__ = ["FisherPass", "module_traces", "power_iteration", "row_stats"]
