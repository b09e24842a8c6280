"""Per-sample gradient statistics of LSTM layers that run as one autograd node (`lstm_sequence`).

The fused recurrence hides its per-step tensors, so hooks inside it see nothing. Two tensors at its
boundary are enough: the gradient of the gate inputs xx_t (= ∂S/∂a_t, the gates' pre-activations) and of
the outputs h_t. With h_{t-1} (the outputs shifted by one) every per-case gradient follows in closed form,
over all steps at once:

    hh_t = W_h h_{t-1}                    (one product for all steps)
    δh_t = LN-backward(∂S/∂a_t; hh_t, α1)  or ∂S/∂a_t without LN on W_h h
    W_h:  G_n = Σ_t δh_nt h_n,t-1ᵀ        squared row norms by the T×T Gram matrices (persample._row_sq)
    α1, β1: Σ_t ∂S/∂a_t ⊙ x̂h_t, Σ_t ∂S/∂a_t          gate bias b (and β2, folded into it): Σ_t ∂S/∂a_t
    W_x, α2 alike from x_t and ∂S/∂a_t
    α3, β3 (LN(c_t)): ∂S/∂h_t in total = ∂S/∂h_t (outputs) + δh_{t+1} W_h, times σ(o_t) tanh'(·), with c_t
                      recomputed from the gates (c_t = σ(f) c_{t-1} + σ(i) tanh(g), element-wise)

`FisherPass` checks every result against the summed gradient (`fisher._consistent`), as for `Recorder`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

import torch
from torch import Tensor, nn

from workers.engine import recurrent
from workers.probes.persample import RowStats, _row_sq, row_stats


class _Projection(Protocol):
    """A fused layer's `ih` or `hh`: a plain or LayerNorm'ed linear map without bias."""

    weight: Tensor


class _Affine(Protocol):
    """A LayerNorm's gain and bias (on a projection, or on c_t)."""

    gain: Tensor
    bias: Tensor


def fused_layers(model: nn.Module) -> dict[str, recurrent.LSTMLayer]:
    """The LSTM layers whose training forward pass is `lstm_sequence` (CPU, or torch kernels on CUDA)."""
    return {
        name: m for name, m in model.named_modules() if isinstance(m, recurrent.LSTMLayer) and m._fused_ok()
    }


class FusedLSTMRecorder:
    """Records each fused LSTM call of one forward pass (inputs, outputs, boundary gradients)."""

    def __init__(self, model: nn.Module):
        self.layers = fused_layers(model)
        self.calls: dict[str, dict] = {}
        self._boundary: list[tuple[dict, Tensor, Tensor]] = []  # (entry, xx, hs) per recorded call
        self._current: str | None = None
        self._handles: list = []
        self._original: Callable[..., Tensor] | None = None

    def __enter__(self) -> FusedLSTMRecorder:
        for name, m in self.layers.items():
            self._handles.append(m.register_forward_pre_hook(self._pre(name)))
        self._original = recurrent.lstm_sequence
        # the module-level name LSTMLayer.forward calls (the stand-in takes `options` by keyword, as passed)
        recurrent.lstm_sequence = self._wrapped  # type: ignore[assignment]
        return self

    def __exit__(self, *exc) -> None:
        recurrent.lstm_sequence = self._original  # type: ignore[assignment]  # set on entering
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _pre(self, name: str):
        def hook(module, inputs):
            self._current = name
            self.calls[name] = {"x": inputs[0].detach()}

        return hook

    def _wrapped(self, xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, eps=1e-5, record=None, **options):
        hs = self._original(xx, w_h, gain_h, bias_h, gain_c, bias_c, h0, c0, eps, record, **options)
        entry = self.calls.get(self._current) if self._current is not None else None
        if entry is None or not (xx.requires_grad and hs.requires_grad):
            return hs
        entry.update(
            xx=xx.detach(), hs=hs.detach(), h0=h0.detach(), c0=c0.detach(), eps=eps, g_xx=None, g_hs=None
        )
        self._current = None
        self._boundary.append((entry, xx, hs))
        return hs

    def boundary(self) -> list[Tensor]:
        """The tensors whose gradient ∂S/∂· the statistics need: each call's gate inputs and outputs."""
        return [t for _, xx, hs in self._boundary for t in (xx, hs)]

    def take(self, grads) -> None:
        """The gradients of `boundary()`, in its order (None where S does not depend on one)."""
        grads = list(grads)
        for i, (entry, _, _) in enumerate(self._boundary):
            g_xx, g_hs = grads[2 * i], grads[2 * i + 1]
            entry["g_xx"] = None if g_xx is None else g_xx.detach()
            entry["g_hs"] = None if g_hs is None else g_hs.detach()

    def stats(self) -> dict[str, RowStats]:
        """Per-sample RowStats by full parameter name, for every recorded layer with its gradients."""
        out: dict[str, RowStats] = {}
        for name, entry in self.calls.items():
            if entry.get("g_xx") is None or entry.get("g_hs") is None:
                continue
            prefix = f"{name}." if name else ""
            for attr, st in _layer_stats(self.layers[name], entry).items():
                out[prefix + attr] = st
        return out


def _ln_parts(z: Tensor, eps: float) -> tuple[Tensor, tuple]:
    """(x̂, what `_ln_backward` needs) of LayerNorm over the last dimension (population variance)."""
    xhat, mean, rstd = torch.native_layer_norm(z, (z.shape[-1],), None, None, eps)
    return xhat, (z, mean, rstd)


def _ln_backward(d: Tensor, saved: tuple, gain: Tensor) -> Tensor:
    """∂S/∂z from ∂S/∂y for y = x̂(z) ⊙ gain + β (torch's own LayerNorm backward kernel)."""
    z, mean, rstd = saved
    return torch.ops.aten.native_layer_norm_backward(
        d, z, (z.shape[-1],), mean, rstd, gain, None, [True, False, False]
    )[0]


def _cases(t: Tensor) -> Tensor:
    """Time-major (T, B, F) as (B, T, F)."""
    return t.transpose(0, 1)


def _weight(a: Tensor, d: Tensor, z: Tensor) -> RowStats:
    """W with summed inputs z_t = W a_t and their gradients d_t (time-major): per-case rows, via Gram."""
    return row_stats((d * z).sum(0), _row_sq(_cases(a), _cases(d)))


def _vector(per_case: Tensor, p: Tensor) -> RowStats:
    """A gain or bias with per-case gradients (B, F)."""
    return row_stats(per_case * p.detach(), per_case.pow(2).sum(0))


@torch.no_grad()
def _layer_stats(m: recurrent.LSTMLayer, e: dict) -> dict[str, RowStats]:
    x, xx, hs, g_a, g_hs, eps = e["x"], e["xx"], e["hs"], e["g_xx"], e["g_hs"], e["eps"]
    w_h, w_x = cast(_Projection, m.hh).weight.detach(), cast(_Projection, m.ih).weight.detach()
    ln_h = hasattr(m.hh, "norm")
    ln_x = hasattr(m.ih, "norm")
    res: dict[str, RowStats] = {}
    h_prev = torch.cat([e["h0"].unsqueeze(0), hs[:-1]])
    hh = h_prev @ w_h.t()
    summed_g = g_a.sum(0)  # Σ_t ∂S/∂a_t per case: the gate bias (and LN(W_x x)'s β, folded into it)
    res["bias"] = _vector(summed_g, m.bias)
    if ln_h:
        xh, saved_h = _ln_parts(hh, eps)
        norm_h = cast(_Affine, m.hh.norm)
        gain_h = norm_h.gain.detach()
        res["hh.norm.gain"] = _vector((g_a * xh).sum(0), gain_h)
        res["hh.norm.bias"] = _vector(summed_g, norm_h.bias)
        d_hh = _ln_backward(g_a, saved_h, gain_h)
        pre = xh * gain_h + norm_h.bias.detach()
    else:
        d_hh, pre = g_a, hh
    res["hh.weight"] = _weight(h_prev, d_hh, hh)
    ax = x @ w_x.t()
    if ln_x:
        xa, saved_x = _ln_parts(ax, eps)
        norm_x = cast(_Affine, m.ih.norm)
        gain_x = norm_x.gain.detach()
        res["ih.norm.gain"] = _vector((g_a * xa).sum(0), gain_x)
        res["ih.norm.bias"] = _vector(summed_g, norm_x.bias)
        res["ih.weight"] = _weight(x, _ln_backward(g_a, saved_x, gain_x), ax)
    else:
        res["ih.weight"] = _weight(x, g_a, ax)
    if m.norm_c is not None:
        res.update(_cell_norm(m, pre + xx, g_hs, d_hh, w_h, e["c0"], eps))
    return res


def _cell_norm(
    m: recurrent.LSTMLayer, a: Tensor, g_hs: Tensor, d_hh: Tensor, w_h: Tensor, c0: Tensor, eps: float
) -> dict[str, RowStats]:
    """LN(c_t)'s gain and bias: c_t recomputed from the gates, ∂S/∂h_t in total from both paths."""
    H = c0.shape[-1]
    sig = torch.sigmoid(a)
    f, i, o = sig[..., :H], sig[..., H : 2 * H], sig[..., 2 * H : 3 * H]
    g = torch.tanh(a[..., 3 * H :])
    ig = i * g
    cells = torch.empty_like(ig)
    c = c0
    for t in range(a.shape[0]):  # the only recurrence left: element-wise, (B, H) per step
        c = torch.addcmul(ig[t], f[t], c, out=cells[t])
    chat, _ = _ln_parts(cells, eps)
    norm_c = cast(_Affine, m.norm_c)
    gain_c, bias_c = norm_c.gain.detach(), norm_c.bias.detach()
    tc = torch.tanh(chat * gain_c + bias_c)
    dh = g_hs.clone()
    dh[:-1] += d_hh[1:] @ w_h  # h_t enters step t+1 through W_h h_t
    dy = dh * o * (1 - tc * tc)
    return {"norm_c.gain": _vector((dy * chat).sum(0), gain_c), "norm_c.bias": _vector(dy.sum(0), bias_c)}
