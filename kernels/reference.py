"""Torch references: `layer_norm_reference` and `ln_lstm_cell_reference` (differentiable, any dtype).

These are the CPU fallback of `kernels.ln_lstm_cell` and the oracles of the kernel tests (run them in
float64 for exact checks). Mixed precision follows the kernels: the maths runs in the promoted dtype of
activations and parameters, results come back in the activations' dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def layer_norm_reference(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float = 1e-5
) -> torch.Tensor:
    """y = γ ⊙ (x − μ)/√(σ² + ε) + β over the last dimension, σ² the population variance (eq. 15)."""
    dtype = x.dtype
    for p in (weight, bias):
        if p is not None:
            dtype = torch.promote_types(dtype, p.dtype)
    xs = x.to(dtype)
    mean = xs.mean(dim=-1, keepdim=True)
    var = (xs - mean).pow(2).mean(dim=-1, keepdim=True)
    y = (xs - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.to(dtype)
    if bias is not None:
        y = y + bias.to(dtype)
    return y.to(x.dtype)


def ln_lstm_cell_reference(
    hh, xx, c_prev, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, eps: float = 1e-5
):
    """(h, c) of one LN-LSTM step, eq. 20 with gates (f, i, o, g):

    [f, i, o, g] = LN(hh; gain_h, bias_h) + LN(xx; gain_x, bias_x) + bias,
    c = σ(f) ⊙ c_prev + σ(i) ⊙ tanh(g),   h = σ(o) ⊙ tanh(LN(c; gain_c, bias_c)).
    """
    out_dtype = hh.dtype
    dtype = out_dtype
    for p in (gain_h, gain_c):
        dtype = torch.promote_types(dtype, p.dtype)
    if dtype == out_dtype and dtype in (torch.float32, torch.float64):
        ln = F.layer_norm  # the fast native path for the plain-dtype case (the engine's CPU runs)
    else:
        ln = None
    H = c_prev.shape[-1]

    def norm(t, n, g, b):
        if ln is not None:
            return ln(t, (n,), g, b, eps)
        return layer_norm_reference(t.to(dtype), g.to(dtype), b.to(dtype), eps)

    gates = norm(hh, 4 * H, gain_h, bias_h) + norm(xx, 4 * H, gain_x, bias_x) + bias.to(dtype)
    f, i, o, g = gates.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c_prev.to(dtype) + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(norm(c, H, gain_c, bias_c))
    return h.to(out_dtype), c.to(out_dtype)


def ln_gru_cell_reference(
    zr_h,
    zr_x,
    wx,
    uh,
    h_prev,
    gain_zr_h,
    bias_zr_h,
    gain_zr_x,
    bias_zr_x,
    gain_wx,
    bias_wx,
    gain_uh,
    bias_uh,
    eps: float = 1e-5,
):
    """h of one LN-GRU step, the paper's eq. 26 with gates (z, r):

    (z, r) = σ(LN(W_h h_{t-1}) + LN(W_x x_t)),   ĥ = tanh(LN(W x_t) + σ(r) ⊙ LN(U h_{t-1})),
    h = (1 − z) ⊙ h_{t-1} + z ⊙ ĥ;   zr_h, zr_x are (B, 2H); wx, uh, h_prev (B, H).
    """
    dtype = torch.promote_types(zr_h.dtype, gain_zr_h.dtype)
    H = h_prev.shape[-1]

    def norm(t, g, b):
        return layer_norm_reference(t.to(dtype), g.to(dtype), b.to(dtype), eps)

    zr = torch.sigmoid(norm(zr_h, gain_zr_h, bias_zr_h) + norm(zr_x, gain_zr_x, bias_zr_x))
    z, r = zr[..., :H], zr[..., H:]
    h_hat = torch.tanh(norm(wx, gain_wx, bias_wx) + r * norm(uh, gain_uh, bias_uh))
    return ((1 - z) * h_prev.to(dtype) + z * h_hat).to(zr_h.dtype)
