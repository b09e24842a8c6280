"""True-Fisher estimates on one batch: per-layer MC traces, Fisher- and Hessian-vector products.

`FisherPass(model, likelihood, x, y)` runs one extra forward pass (BatchNorm buffers and the model's
capture record are restored afterwards, parameter .grad is never touched) and offers:

- `sampled(residual)`: back-propagate a residual (sampled labels: true Fisher; observed: empirical)
  and return RowStats per parameter plus the estimator used ("per-sample" from the recorders where the layer
  allows it, else "summed-gradient": ‖∇θ Σ_n log p(ŷ_n|x_n)‖²/N, unbiased but noisier);
- `fvp(v)` = F v = (1/N) Jᵀ Λ J v: Jv, then Λ, then a vjp;
- `hvp(v)` = ∇²L v of the task's training loss.

Three paths, chosen per model. A model with LSTM layers that train as one fused autograd node
(`lstm_sequence`, no double backward and no forward mode) is probed through that same fast path: per-case
gradient norms from its boundary tensors (`workers.probes.fused`), Jv by central differences of two
forward passes without a graph (float32, with the step `_step` chooses), ∇²L v by central
differences of two gradients. The engine's MLP with LayerNorm or no normalizer takes its exact Jv from a
tangent pass over the recorded forward (`workers.probes.tangent`), no double backward. Every other model
keeps the exact products by double backward (Jv as the derivative of a vjp, since forward mode is missing
for some kernels), with recurrent layers on their step-by-step path, where the recorder sees each step.

Per-case gradients reach the recorders through the same `autograd.grad` call that forms ∇S: the recorded
outputs are among its inputs (`Recorder.boundary`), so no tensor hook runs on any backward pass.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from torch import Tensor, nn
from torch.func import functional_call

from workers.probes.fused import FusedLSTMRecorder, fused_layers
from workers.probes.likelihood import Likelihood
from workers.probes.persample import Recorder, RowStats, hook_kinds, row_stats, rows, summed_stats
from workers.probes.tangent import MLPTangent

if TYPE_CHECKING:
    from workers.engine.options import EngineOptions

FD_SHRINK = 100.0  # the central-difference step is ∛ε‖θ‖ / FD_SHRINK (see FisherPass._step)


class _PathPicking(Protocol):
    """A layer that picks its kernels by its `engine_options` (workers.engine.options)."""

    engine_options: EngineOptions


class _Capturing(Protocol):
    """A model's capture switch and record (workers.engine.models), read here with getattr: None where
    the model has none."""

    capture: bool | str | None
    captured: dict[str, Any] | None


@contextlib.contextmanager
def _twice_differentiable(device: torch.device, model: nn.Module):
    """On CUDA: no cuDNN RNNs and the torch kernels in `model`'s layers (the Triton custom ops have no
    double backward), then the layers' own options again."""
    if device.type != "cuda":
        yield
        return
    layers = [cast(_PathPicking, m) for m in model.modules() if hasattr(m, "engine_options")]
    before = [m.engine_options for m in layers]
    try:
        for m in layers:
            m.engine_options = m.engine_options.replace(kernel_backend="torch")
        with torch.backends.cudnn.flags(enabled=False):
            yield
    finally:
        for m, options in zip(layers, before, strict=True):
            m.engine_options = options


@dataclass
class Layout:
    """What every pass over one model shares (its structure does not change during a run): built once.

    `verified` holds the parameters whose recorded per-case sums have matched the summed gradient once
    (`_consistent`); the check is structural (every use of the weight passed through a recorded call), so a
    verified parameter is not checked again, and one that failed is checked at every pass."""

    names: list[str]
    params: list[Tensor]
    fused: bool
    kinds: dict[str, str]
    modules: dict[str, nn.Module]
    buffered: bool = True  # whether the model has buffers (BatchNorm's statistics) a pass must restore
    verified: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, model: nn.Module, fused: bool | None = None) -> Layout:
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        return cls(
            names=[n for n, _ in named],
            params=[p for _, p in named],
            fused=bool(fused_layers(model)) if fused is None else fused,
            kinds=hook_kinds(model),
            modules=dict(model.named_modules()),
            buffered=any(True for _ in model.buffers()),
        )


class RecordedForward:
    """The training step's own forward pass, recorded for the Fisher estimate of that same step.

    On the CPU the training forward takes the path a FisherPass would take (the fused LSTM's one node, or
    the step-by-step layers, both differentiable as the estimate needs), at the same parameters, on the
    same batch: with the FisherPass's recorders entered around it and its graph kept through the loss's
    backward (`retain_graph`), the estimate needs no forward pass of its own (0.3–0.5 of a training step).
    Used as a context manager around `model(x)`; `FisherPass(..., recorded=…, outputs=…)` takes it up."""

    def __init__(self, model: nn.Module, layout: Layout, batch: int):
        self.recorder = Recorder(model, batch, layout.kinds, layout.modules)
        self.fused_rec = FusedLSTMRecorder(model) if layout.fused else None
        self._stack: contextlib.ExitStack | None = None

    @staticmethod
    def applies(model: nn.Module) -> bool:
        """On the CPU only: on CUDA the training forward runs kernels without a double backward."""
        return next(model.parameters()).device.type == "cpu"

    def __enter__(self) -> RecordedForward:
        self._stack = contextlib.ExitStack()
        for rec in (self.recorder, self.fused_rec):
            if rec is not None:
                self._stack.enter_context(rec)
        return self

    def __exit__(self, *exc) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None


class FisherPass:
    """One batch's forward graph, kept for Monte-Carlo traces and curvature-vector products."""

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        x: Tensor,
        y: Tensor,
        loss_fn=None,
        use_recorder: bool = True,
        fused: bool | None = None,
        layout: Layout | None = None,
        recorded: RecordedForward | None = None,
        outputs: Tensor | None = None,
    ):
        """`recorded` and `outputs`: the training step's forward pass over x (see RecordedForward), whose
        graph is still kept; the pass then runs no forward of its own."""
        self.model, self.lik, self.x, self.y, self.loss_fn = model, likelihood, x, y, loss_fn
        self.layout = layout if layout is not None else Layout.of(model, fused)
        self.names, self.params = self.layout.names, self.layout.params
        self.buffers = {n: b.clone() for n, b in model.named_buffers()} if self.layout.buffered else {}
        # the fused LSTM path (finite-difference products) or the step-by-step one (exact double backward)
        self.fused = self.layout.fused
        self.recorder: Recorder | None  # the training step's (recorded), this pass's own, or none
        if recorded is not None and outputs is not None:
            self.recorder, self.fused_rec, self.outputs = recorded.recorder, recorded.fused_rec, outputs
            self._ready(likelihood, y)
            return
        capture, captured = getattr(model, "capture", None), getattr(model, "captured", None)
        capturing = cast(_Capturing, model)
        if capture is not None:  # recurrent nets off the fused path: step by step, twice differentiable
            capturing.capture = hasattr(model, "rnn") and not self.fused
        self.recorder = (
            Recorder(model, x.shape[0], self.layout.kinds, self.layout.modules) if use_recorder else None
        )
        self.fused_rec = FusedLSTMRecorder(model) if use_recorder and self.fused else None
        try:
            with contextlib.ExitStack() as hooks:
                hooks.enter_context(_twice_differentiable(x.device, model))
                hooks.enter_context(torch.enable_grad())
                for rec in (self.recorder, self.fused_rec):
                    if rec is not None:
                        hooks.enter_context(rec)
                self.outputs = model(x)
        finally:
            if self.buffers:
                _restore_buffers(model, {n: b.clone() for n, b in self.buffers.items()})
            if capture is not None:
                capturing.capture = capture
                capturing.captured = captured
        self._ready(likelihood, y)

    def _ready(self, likelihood: Likelihood, y: Tensor) -> None:
        self.pred, self.tgt, self.case = likelihood.select(self.outputs, y)
        self.n = int(self.pred.shape[0])
        self._u: Tensor | None = None
        self._gu: tuple | None = None
        self._theta: list[Tensor] | None = None  # θ, for `_shifted_in_place` to put back
        self._hg: tuple | None = None
        self._probs: Tensor | None = None  # softmax of the predictions, for `lam`
        # J v by a tangent pass over the recorded forward where the model allows (workers.probes.tangent)
        self._tangent = (
            None if self.fused else MLPTangent.of(self.model, self.recorder, self.names, self.pred)
        )

    def _grad(self, outputs, grad_outputs, extra: list[Tensor] | None = None, **kw):
        """Gradients per parameter (zeros where unused); with `extra` (more tensors of the graph):
        (those, the gradients of `extra`, None where unused)."""
        inputs = self.params if not extra else [*self.params, *extra]
        grads = torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True, **kw)
        mine = [torch.zeros_like(p) if g is None else g for p, g in zip(self.params, grads, strict=False)]
        if extra is None:
            return mine
        return mine, grads[len(self.params) :]

    def sampled(self, residual: Tensor) -> tuple[dict[str, RowStats], dict[str, str], list[Tensor]]:
        """(RowStats per parameter name, estimator per parameter name, the summed gradient ∇S)."""
        recs = [r for r in (self.recorder, self.fused_rec) if r is not None]
        bounds = [rec.boundary() for rec in recs]
        extra = [t for b in bounds for t in b]  # their ∂S/∂a come with ∇S, from the same backward
        if self.fused or self._gu is not None or self._tangent is not None:
            grads, taken = self._grad(self.pred, residual, extra, retain_graph=True)
        else:  # one backward serves both: ∇S = Jᵀr, and (kept differentiable in r) the jvp's Jᵀu
            self._u = residual.detach().clone().requires_grad_(True)
            gu, taken = self._grad(self.pred, self._u, extra, retain_graph=True, create_graph=True)
            self._gu = tuple(gu)
            grads = [g.detach() for g in gu]
        start = 0
        for rec, b in zip(recs, bounds, strict=True):
            rec.take(taken[start : start + len(b)])
            start += len(b)
        stats: dict[str, RowStats] = {}
        est: dict[str, str] = {}
        by_name = dict(zip(self.names, zip(self.params, grads, strict=True), strict=True))
        per_sample: dict[str, RowStats] = {}
        if self.recorder is not None:
            mods = self.layout.modules
            for mod_name in self.recorder.kinds:
                per = self.recorder.stats(mod_name, mods[mod_name])
                for attr, st in (per or {}).items():
                    per_sample[f"{mod_name}.{attr}" if mod_name else attr] = st
        if self.fused_rec is not None:
            per_sample.update(self.fused_rec.stats())
        verified = self.layout.verified
        # the engine MLP whose tangent pass applies is complete by construction (MLPTangent.of checked one
        # recorded call per layer, no batch-mixing normalizer, the head's output the predictions): no
        # numeric check needed (it would cost a good part of a step at the first estimate)
        complete = self._tangent is not None
        for full, st in per_sample.items():
            if full in by_name and (complete or full in verified or _consistent(st, *by_name[full])):
                stats[full], est[full] = st, "per-sample"
                verified.add(full)
        for name, (p, g) in by_name.items():
            if name not in stats:
                stats[name], est[name] = summed_stats(g, p), "summed-gradient"
        return stats, est, grads

    def fvp(self, v: list[Tensor]) -> list[Tensor]:
        """F v = (1/N) Jᵀ Λ J v over this batch (J: Jacobian of the scored predictions)."""
        return self.vjp(self.lam(self.jv(v)) / self.n)

    @property
    def probs(self) -> Tensor:
        """The softmax of the scored predictions, computed once per pass."""
        if self._probs is None:
            self._probs = self.lik.probabilities(self.pred)
        return self._probs

    def lam(self, v: Tensor) -> Tensor:
        """Λ v per scored prediction."""
        return v if self.lik.gaussian else self.lik.lam(self.pred, v, self.probs)

    def jv(self, v: list[Tensor]) -> Tensor:
        """J v on this pass's path: a tangent pass (the MLP), the double backward, or central differences
        (the fused LSTM path)."""
        if self._tangent is not None:
            return self._tangent(v)
        return self.jvp_fd(v) if self.fused else self.jvp(v)

    def vjp(self, u: Tensor) -> list[Tensor]:
        """Jᵀ u per parameter (u shaped like the scored predictions)."""
        return self._grad(self.pred, u, retain_graph=True)

    def output_layer(self) -> tuple[str, Tensor] | None:
        """(module name, its input (N, fan_in)) when the scored predictions are exactly one call's outputs
        of a recorded nn.Linear (a feed-forward classifier's head), else None."""
        rec = self.recorder
        if rec is None or self.pred is not self.outputs or self.pred.dim() != 2:
            return None
        for name, kind in rec.kinds.items():
            calls = rec.calls.get(name, [])
            if kind != "linear" or len(calls) != 1 or calls[0][0] is None:
                continue
            x, out = calls[0][0], calls[0][1]
            same = out.shape == self.pred.shape and out.data_ptr() == self.pred.data_ptr()
            if same and x.dim() == 2 and x.shape[0] == self.n:
                return name, x
        return None

    def hvp(self, v: list[Tensor]) -> list[Tensor]:
        """∇²L v for the task's training loss on this batch."""
        return self.hvp_fd(v) if self.fused else self.hvp_exact(v)

    def _step(self, v: list[Tensor]) -> float:
        """Central-difference step for direction v: ∛(machine ε) × ‖θ‖ / FD_SHRINK.

        ∛ε × ‖θ‖ alone (the textbook step) is a large move of the weights in float32: along the top
        eigendirection, the one λ_max needs, the LSTMs saturate over such a step and J v comes out far
        off (against a float64 difference with a tiny step). FD_SHRINK keeps the step inside the region
        where the difference is accurate along the top and a random direction (the fused-path tests
        check it against float64)."""
        theta = _norm(self.params)
        eps = float(torch.finfo(self.pred.dtype).eps)
        return eps ** (1 / 3) * max(theta, 1.0) / FD_SHRINK / max(_norm(v), 1e-30)

    def _shifted(self, v: list[Tensor], h: float, grad: bool = False):
        """The scored predictions (and with grad=True the loss gradient) at θ + h v; buffers kept."""
        if not grad:
            return self._shifted_in_place(v, h)
        params = {
            n: (p.detach() + h * t).requires_grad_(grad)
            for n, p, t in zip(self.names, self.params, v, strict=True)
        }
        capture, captured = getattr(self.model, "capture", None), getattr(self.model, "captured", None)
        capturing = cast(_Capturing, self.model)
        if capture is not None:
            capturing.capture = False  # the fused path, and a traced step's record left alone
        try:
            with _twice_differentiable(self.x.device, self.model), torch.set_grad_enabled(grad):
                out = functional_call(self.model, params, (self.x,))
                if not grad:
                    return self.lik.select(out, self.y)[0]
                loss = self.loss_fn(out, self.y)
                return torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        finally:
            if self.buffers:
                _restore_buffers(self.model, {n: b.clone() for n, b in self.buffers.items()})
            if capture is not None:
                capturing.capture, capturing.captured = capture, captured

    def _shifted_in_place(self, v: list[Tensor], h: float) -> Tensor:
        """The scored predictions at θ + h v, the model's own forward with its parameters moved in place
        and put back bit for bit (a copy of θ made once per pass): no graph, and no functional_call or
        shifted copies, which would cost a sizeable share of a training step on top of the forward.
        Moved through `.data`, so autograd's version counters — which the kept graph checks — see nothing;
        every kept tensor reads θ again before anything else runs."""
        data = [p.data for p in self.params]
        if self._theta is None:
            self._theta = [t.clone() for t in data]
        capture, captured = getattr(self.model, "capture", None), getattr(self.model, "captured", None)
        capturing = cast(_Capturing, self.model)
        if capture:
            capturing.capture = False  # the fused path, and a traced step's record left alone
        try:
            torch._foreach_add_(data, v, alpha=h)
            with _twice_differentiable(self.x.device, self.model), torch.no_grad():
                out = self.model(self.x)
            return self.lik.select(out, self.y)[0]
        finally:
            torch._foreach_copy_(data, self._theta)
            if self.buffers:
                _restore_buffers(self.model, {n: b.clone() for n, b in self.buffers.items()})
            if capture:
                capturing.capture, capturing.captured = capture, captured

    def jvp_fd(self, v: list[Tensor]) -> Tensor:
        """J v by central differences: two forward passes without a graph, on the training path."""
        h = self._step(v)
        return (self._shifted(v, h) - self._shifted(v, -h)) / (2 * h)

    def hvp_fd(self, v: list[Tensor]) -> list[Tensor]:
        """∇²L v by central differences of two loss gradients."""
        h = self._step(v)
        plus, minus = self._shifted(v, h, grad=True), self._shifted(v, -h, grad=True)
        return [
            torch.zeros_like(p) if a is None else (a - b) / (2 * h)
            for p, a, b in zip(self.params, plus, minus, strict=True)
        ]

    def curvature_along(self, v: list[Tensor], unit: bool = False) -> float:
        """vᵀ F v / ‖v‖² from one Jacobian-vector product: (1/N) Σ_k (J v)_kᵀ Λ_k (J v)_k / ‖v‖²
        (unit=True: the caller knows ‖v‖ = 1)."""
        jv = self.jv(v)
        sq = 1.0 if unit else max(_norm(v) ** 2, 1e-300)
        return float(torch.dot(jv.reshape(-1), self.lam(jv).reshape(-1))) / self.n / sq

    def jvp(self, v: list[Tensor]) -> Tensor:
        """J v exactly, as the derivative of a vjp (double backward): Jᵀu is linear in u, so any u will do
        (the trace pass leaves it at the sampled residual, saving a backward)."""
        if self._gu is None:
            self._u = torch.zeros_like(self.pred, requires_grad=True)
            self._gu = tuple(self._grad(self.pred, self._u, retain_graph=True, create_graph=True))
        assert self._u is not None  # made with _gu
        jv = torch.autograd.grad(self._gu, self._u, v, retain_graph=True, allow_unused=True)[0]
        return torch.zeros_like(self.pred) if jv is None else jv.detach()

    def hvp_exact(self, v: list[Tensor]) -> list[Tensor]:
        """∇²L v by double backward."""
        if self._hg is None:
            loss = self.loss_fn(self.outputs, self.y)
            self._hg = tuple(self._grad(loss, None, retain_graph=True, create_graph=True))
        hv = torch.autograd.grad(self._hg, self.params, v, retain_graph=True, allow_unused=True)
        return [
            torch.zeros_like(p) if h is None else h.detach() for p, h in zip(self.params, hv, strict=True)
        ]


def _restore_buffers(model: nn.Module, saved: dict[str, Tensor]) -> None:
    """Put back BatchNorm's running statistics: swap in the saved copies rather than write in place,
    because the forward graph still holds the buffers it read (autograd version checks)."""
    if not saved:  # most models have no buffers: skip the walk over the modules
        return
    for mod_name, m in model.named_modules():
        prefix = f"{mod_name}." if mod_name else ""
        for name in list(m._buffers):
            if f"{prefix}{name}" in saved:
                m._buffers[name] = saved[f"{prefix}{name}"]


def _consistent(st: RowStats, p: Tensor, g: Tensor) -> bool:
    """Per-case terms must add up to the summed gradient, row by row (else some use escaped the recorder):
    Σ_n ⟨G_n[i], w_i⟩ = ⟨∇S[i], w_i⟩. One read-back for the three maxima."""
    want = (rows(g) * rows(p.detach())).sum(1)
    got = st.dot_sum
    err, a, b = torch.stack([(got - want).abs().max(), want.abs().max(), got.abs().max()]).tolist()
    scale = a + b + 1e-30
    return err <= 1e-4 * scale + 1e-12 * (1 + scale)


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
    return float(torch.sqrt(cast(Tensor, sum(t.detach().pow(2).sum() for t in v))))  # v is never empty


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


__all__ = ["FisherPass", "Layout", "RecordedForward", "module_traces", "power_iteration", "row_stats"]
