"""Per-sample squared gradient norms from recorded layer calls, without per-sample gradient tensors.

For a Linear layer z = W a + b called on one case n at "times" t (a sequence, or repeated calls in a
recurrent loop), case n's gradient is G_n = Σ_t δ_nt a_ntᵀ with δ = ∂S/∂z. Its squared row norms are
Σ_ts δ_nti δ_nsi (a_nt · a_ns) — one Gram matrix per case, or δ_ni² ‖a_n‖² when there is one time.
Row-wise inner products with the weight, ⟨G_n[i], w_i⟩ = Σ_t δ_nti (z_nti − b_i), give the curvature
along the weight direction. LayerNorm / RMSNorm gains: G_n = Σ_t δ_nt ⊙ x̂_nt with x̂ = (y − b) / g.

This is valid only when case n's loss depends on no other case's summed inputs: layers that run before
a BatchNorm in training mode mix the batch, so `Recorder.valid` leaves them to the summed fallback.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from workers.engine.norms import WeightNormLinear


class RowStats:
    """Sums over cases n, per row i: ‖G_n[i]‖² (`row_sq`), ⟨G_n[i], w_i⟩² (`row_dot_sq`),
    (Σ_i ⟨G_n[i], w_i⟩)² (`whole_dot_sq`) and ⟨G_n[i], w_i⟩ (`dot_sum`), from the per-case row inner
    products (cases, R). The last three are computed when first read: most parameters (biases, gains)
    only need their trace."""

    def __init__(self, row_sq: Tensor, per_case_dot):
        """`per_case_dot`: the (cases, R) tensor, or a function that forms it when first read (a gain's or
        a bias's is read only by the first estimate's consistency check)."""
        self.row_sq, self._per_case_dot = row_sq, per_case_dot

    @cached_property
    def per_case_dot(self) -> Tensor:
        dot = self._per_case_dot
        return dot() if callable(dot) else dot

    @cached_property
    def row_dot_sq(self) -> Tensor:
        return self.per_case_dot.pow(2).sum(0)

    @cached_property
    def whole_dot_sq(self) -> Tensor:
        return self.per_case_dot.sum(1).pow(2).sum()

    @cached_property
    def dot_sum(self) -> Tensor:
        return self.per_case_dot.sum(0)


def rows(t: Tensor) -> Tensor:
    """A parameter (or its gradient) as rows: a weight's output units, a vector's elements."""
    if t.dim() >= 2:
        return t.reshape(t.shape[0], -1)
    return t.reshape(-1, 1)


def row_stats(per_case_dot, row_sq: Tensor) -> RowStats:
    """RowStats from per-case row inner products (cases, R) and the summed squared row norms (R,)."""
    return RowStats(row_sq, per_case_dot)


def summed_stats(grad: Tensor, param: Tensor) -> RowStats:
    """The summed-gradient 'single case': the whole batch's gradient ∇S as one case."""
    g, w = rows(grad), rows(param.detach())
    return row_stats((g * w).sum(1, keepdim=True).T, g.pow(2).sum(1))


def is_batch_norm(m: nn.Module) -> bool:
    """A BatchNorm module (it mixes the batch while in training mode)."""
    return "BatchNorm" in type(m).__name__ or isinstance(m, nn.modules.batchnorm._BatchNorm)


def affine_params(m: nn.Module) -> tuple[Tensor, Tensor | None] | None:
    """(gain, bias) of a per-case normalizer (LayerNorm, RMSNorm) whose output is x̂ ⊙ g + b."""
    name = type(m).__name__
    if name not in ("LayerNorm", "RMSNorm"):
        return None
    gain = getattr(m, "gain", None)
    if gain is None:
        gain = getattr(m, "weight", None)
    bias = getattr(m, "bias", None)
    if not isinstance(gain, Tensor) or gain.dim() != 1:
        return None
    return gain, bias if isinstance(bias, Tensor) else None


def hook_kinds(model: nn.Module) -> dict[str, str]:
    """How `Recorder` hooks each module: "summed" / "wn" (its `summed` wrapped), "linear", "affine"
    (per-case normalizer gain), "bn" (watched only: it mixes the batch)."""
    kinds: dict[str, str] = {}
    for name, m in model.named_modules():
        kind = type(m).__name__
        if kind in ("NormLinear", "PlainLinear") and m.weight.requires_grad and m.weight.dim() == 2:
            kinds[name] = "summed"
        elif kind == "WeightNormLinear" and m.v.requires_grad:
            kinds[name] = "wn"
        elif isinstance(m, nn.Linear) and m.weight.requires_grad:
            kinds[name] = "linear"
        elif (
            (params := affine_params(m)) is not None
            and params[0].requires_grad
            and not getattr(m, "channels", False)
        ):
            kinds[name] = "affine"
        elif is_batch_norm(m):
            kinds[name] = "bn"
    return kinds


_MISSING = object()  # no instance attribute of that name before the recorder set one


class Recorder:
    """Wraps hookable layers during one forward pass and turns the recorded δ into per-sample RowStats.

    The engine's layers compute a = `summed(x)` (W x, or v·x for WeightNorm) and then `normalize(a)`;
    models call the two directly, so the recorder wraps each layer's `summed` for the pass. Plain
    `nn.Linear` heads and per-case normalizers with a gain (LayerNorm, RMSNorm) are wrapped through their
    `forward`; BatchNorm in training mode is only watched, to know which layers ran before the last
    batch-mixing call. Time-major tensors (T, B, …) of recurrent layers are recognised from the batch size.

    No hooks: the wrappers (instance attributes shadowing the methods, removed on exit) keep the module
    call on torch's fast path, and the gradient δ = ∂S/∂a of every recorded output comes from the same
    `autograd.grad` call that forms ∇S, with the outputs among its inputs (`boundary`, then `take`):
    tensor hooks cost a Python call on every backward through the graph, the training step's included.
    """

    def __init__(
        self,
        model: nn.Module,
        batch: int,
        kinds: dict[str, str] | None = None,
        modules: dict[str, nn.Module] | None = None,
    ):
        self.model, self.batch = model, batch
        self.calls: dict[str, list[list]] = {}  # module name -> [[input x, output, δ], …]
        self.first_call: dict[str, int] = {}
        self.last_bn_call = -1
        self.counter = 0
        self.wrapped: list[tuple[nn.Module, str, object]] = []
        self.kinds: dict[str, str] = hook_kinds(model) if kinds is None else kinds
        self.modules = modules
        self._outputs: list[Tensor] = []  # the recorded outputs, in call order (autograd.grad inputs)
        self._entries: list[list] = []

    def __enter__(self) -> Recorder:
        mods = self.modules if self.modules is not None else dict(self.model.named_modules())
        for name, kind in self.kinds.items():
            m = mods[name]
            attr = "summed" if kind in ("summed", "wn") else "forward"
            self.wrapped.append((m, attr, vars(m).get(attr, _MISSING)))  # an instance attribute to put back
            setattr(m, attr, self._wrap(name, kind, getattr(m, attr)))  # shadows the method
        return self

    def __exit__(self, *exc) -> None:
        for m, attr, previous in reversed(self.wrapped):
            if previous is _MISSING:
                delattr(m, attr)
            else:  # a recorder inside another one, or a method replaced on the instance by its owner
                setattr(m, attr, previous)
        self.wrapped.clear()

    def _entry(self, name: str, x: Tensor | None, out: Tensor) -> None:
        self.counter += 1
        self.first_call.setdefault(name, self.counter)
        entry = [None if x is None else x.detach(), out.detach(), None]
        self.calls.setdefault(name, []).append(entry)
        self._outputs.append(out)
        self._entries.append(entry)

    def _wrap(self, name: str, kind: str, method):
        if kind == "bn":

            def watch(*args, **kwargs):
                if method.__self__.training:  # in eval mode it uses running statistics: no mixing
                    self.counter += 1
                    self.last_bn_call = self.counter
                return method(*args, **kwargs)

            return watch
        keep_input = kind != "affine"

        def wrapper(x, *args, **kwargs):
            out = method(x, *args, **kwargs)
            if isinstance(out, Tensor) and out.requires_grad:
                self._entry(name, x if keep_input else None, out)
            return out

        return wrapper

    def boundary(self) -> list[Tensor]:
        """The recorded outputs whose gradient ∂S/∂a the statistics need (inputs to `autograd.grad`)."""
        return self._outputs

    def take(self, grads) -> None:
        """The gradients of `boundary()`, in its order (None where S does not depend on one)."""
        for entry, g in zip(self._entries, grads, strict=True):
            entry[2] = None if g is None else g.detach()

    def valid(self, name: str) -> bool:
        """Per-sample decomposition holds: every call of the layer came after the last batch-mixing one."""
        return name in self.first_call and self.first_call[name] > self.last_bn_call

    def _cases(self, t: Tensor) -> Tensor | None:
        """t as (B, T, features): batch-first, or time-major (T, B, features) transposed."""
        b = self.batch
        if t.dim() <= 2 or (t.shape[0] == b and t.shape[1] != b):
            return t.reshape(b, -1, t.shape[-1]) if t.shape[0] == b else None
        if t.dim() == 3 and t.shape[1] == b and t.shape[0] != b:
            return t.transpose(0, 1)
        return None  # ambiguous (T == B) or an unknown layout: leave it to the summed fallback

    def stats(self, name: str, module: nn.Module) -> dict[str, RowStats] | None:
        """Per-sample RowStats of the module's parameters (by parameter attribute name), or None."""
        calls = self.calls.get(name, [])
        if not calls or any(c[2] is None for c in calls) or not self.valid(name):
            return None
        kind = self.kinds[name]
        parts = []
        for c in calls:
            x = None if c[0] is None else self._cases(c[0])
            o, g = self._cases(c[1]), self._cases(c[2])
            if o is None or g is None or (c[0] is not None and x is None):
                return None
            parts.append((x, o, g))
        out, d = _joined([p[1] for p in parts]), _joined([p[2] for p in parts])
        if len(parts) == 1 and out.shape[1] == 1 and kind != "wn":  # one feed-forward call: as (B, F)
            parts = [(None if x is None else x[:, 0], o[:, 0], g[:, 0]) for x, o, g in parts]
            out, d = parts[0][1], parts[0][2]
        if kind == "affine":
            return _affine(module, out, d)
        a = _joined(cast("list[Tensor]", [p[0] for p in parts]))  # every kind but affine records inputs
        if kind == "wn":
            return _weight_norm(cast("WeightNormLinear", module), a, out, d)
        weight = cast(Tensor, module.weight)
        if kind == "summed":  # a = W x exactly; PlainLinear adds its bias after, with the same gradient
            return _linear(weight, None, a, out, d, bias_after=getattr(module, "bias", None))
        return _linear(weight, cast("Tensor | None", module.bias), a, out, d)


def _joined(ts: list[Tensor]) -> Tensor:
    """The calls' (B, T, F) tensors along time (one call: as it is, no copy)."""
    return ts[0] if len(ts) == 1 else torch.cat(ts, 1)


def _over_time(t: Tensor) -> Tensor:
    """Σ_t of a (B, T, F) tensor; a one-call (B, F) tensor as it is."""
    return t if t.dim() == 2 else t.sum(1)


def _row_sq(a: Tensor, d: Tensor) -> Tensor:
    """Σ_n ‖Σ_t d_nti a_nt‖² for each row i, by the cheapest route for the shapes ((B, F): one time)."""
    if a.dim() == 2:  # δ_ni² ‖a_n‖², summed over n
        return d.square().t() @ a.square().sum(1)
    steps, fan_in, fan_out = a.shape[1], a.shape[2], d.shape[2]
    if steps == 1:
        return (d[:, 0].pow(2) * a[:, 0].pow(2).sum(-1, keepdim=True)).sum(0)
    if steps * (fan_in + fan_out) <= fan_in * fan_out:
        gram = a @ a.transpose(1, 2)  # (B, T, T)
        return (d * (gram @ d)).sum((0, 1))
    return torch.einsum("bti,btd->bid", d, a).pow(2).sum((0, 2))


def _linear(
    weight: Tensor, bias: Tensor | None, a: Tensor, z: Tensor, d: Tensor, bias_after: Tensor | None = None
) -> dict[str, RowStats]:
    """G_n = Σ_t δ_nt a_ntᵀ (tensors (B, T, F), or (B, F) for one feed-forward call); the per-case dot
    products are formed when read."""
    zb = z - bias.detach() if bias is not None else z  # W a: the summed inputs
    res = {"weight": row_stats(lambda: _over_time(d * zb), _row_sq(a, d))}
    bias = bias if bias is not None else bias_after
    if bias is not None and bias.requires_grad:
        gb, b = _over_time(d), bias.detach()
        res["bias"] = row_stats(lambda: gb * b, gb.square().sum(0))
    return res


def _weight_norm(m: WeightNormLinear, a: Tensor, s: Tensor, d: Tensor) -> dict[str, RowStats]:
    """s = v·a, y = s g/‖v‖ + b, d = ∂S/∂s: ∂/∂v_i = (I − u_i u_iᵀ) Σ_t d_ti a_t, orthogonal to v_i."""
    v, g = m.v.detach(), m.g.detach()
    vn = v.norm(dim=1)
    along = (d * s).sum(1) / vn  # (B, H): u_i · Σ_t d_ti a_t
    row_sq = _row_sq(a, d) - along.pow(2).sum(0)
    gg = along * vn / g  # ∂y/∂g_i = s_i/‖v_i‖ and ∂S/∂y = d ‖v‖/g
    # ⟨G_n[i], v_i⟩ from its two paths (through s and through ‖v‖): ≈ 0 up to rounding; the payload's
    # along_w_curvature for WeightNorm is measured independently, by a Jacobian-vector product
    res = {"v": row_stats((d * s).sum(1) - along * vn, row_sq), "g": row_stats(gg * g, gg.pow(2).sum(0))}
    if m.b is not None and m.b.requires_grad:
        gb = d.sum(1) * vn / g
        res["b"] = row_stats(gb * m.b.detach(), gb.pow(2).sum(0))
    return res


def _affine(m: nn.Module, y: Tensor, d: Tensor) -> dict[str, RowStats] | None:
    gain, bias = cast("tuple[Tensor, Tensor | None]", affine_params(m))  # hook_kinds: "affine" has them
    g = gain.detach()
    if g.abs().min() < 1e-6:  # x̂ = (y − b) / g would be unreliable
        return None
    # the gain's per-case ⟨G_n[i], g_i⟩ = Σ_t δ ⊙ x̂ ⊙ g = Σ_t δ ⊙ (y − b), and ‖G_n[i]‖² = that² / g²
    dot = _over_time(d * (y - bias.detach()) if bias is not None else d * y)
    res = {"gain" if hasattr(m, "gain") else "weight": row_stats(dot, dot.square().sum(0) / g.square())}
    if bias is not None and bias.requires_grad:
        gb, b = _over_time(d), bias.detach()
        res["bias"] = row_stats(lambda: gb * b, gb.square().sum(0))
    return res
