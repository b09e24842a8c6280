"""`triton_ln_lstm_sequence(...) -> hs`: a whole LN-LSTM recurrence (eq. 20) as one autograd node.

The per-step cell of `lstm_op` pays, on every step, a torch custom-op dispatch, an autograd node, a
fixed-order column sum of the parameter partials and fresh allocations: measured on an H200, 85 µs of
host time per forward call, so a 64-step LN-LSTM ran 16–32× slower than cuDNN's `nn.LSTM` although each
kernel takes microseconds. Here the time loop runs inside one `torch.autograd.Function`:

- forward, per step: one product hh_t = h_{t-1} W_hᵀ written into a (T, B, 4H) buffer, and one launch
  of the fused cell kernel (`lstm_triton._ln_lstm_fwd`: LN(hh_t) + LN(ax_t) + b, gates, c_t, LN(c_t),
  h_t) writing h_t, c_t and the row statistics into preallocated (T, B, ·) buffers;
- backward, per step: ∂L/∂h_t = ∂L/∂out_t + ∂L/∂hh_{t+1} W_h (one addmm) and one launch of the fused
  backward (`_ln_lstm_bwd` with ACC: each batch row's dγ/dβ contributions are added to its own row of
  one fp32 (B, 14H) buffer, step after step in stream order, so no per-step reduction); then, once for
  the whole sequence, dW_h as one (4H × T·B) · (T·B × H) product and one fixed-order column sum of the
  partials. Deterministic for a given device and shape: no atomics anywhere.

The input side has no recurrence: the caller passes ax = x W_xᵀ for all steps (one product), and the
kernel normalizes ax_t itself (LN over 4H with γ_x, β_x), so ∂L/∂ax comes back through the same launch.
Launch configurations: the fused cell's own (`lstm_op.launch`, cached per shape). Not twice
differentiable (the probes' curvature products switch the kernels to torch).

On CUDA each direction's loop (`_forward`, `_backward`) is captured once per shape as a CUDA graph and
replayed (`kernels.graphs`): one host call instead of 2T launches from Python, on copies of the inputs;
the same launches in the same order. The backward graph reads the forward graph's buffers (lent to the
call that saved them), so a training step copies in ax and ∂L/∂hs and clones out hs and the gradients.
The `gpu` tests check replays against each other bit for bit and against the eager loop to rounding
(cuBLAS may pick another algorithm on the capture stream); the eager loop runs when graphs are off, under
someone else's capture, and on CPU.
"""

# No `from __future__ import annotations`, like the other op modules (torch 2.11 on the GPU machine).
import torch
from torch.autograd.function import once_differentiable

from kernels import graphs
from kernels import lstm_triton as K
from kernels.layer_norm_op import column_sum
from kernels.lstm_op import PARAM_NAMES, _check, launch


def _forward(ax, w_h, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, h0, c0, *, eps):
    """The recurrence's launches: (hh, hs, cs, stats) per step, from contiguous ax, params, h0, c0."""
    T, B, G = ax.shape
    H = G // 4
    block, fwd_warps, _, _ = launch(B, H, ax.device)
    params = (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)
    hh = ax.new_empty(T, B, G)  # raw h_{t-1} W_hᵀ per step, kept for the backward
    hs = ax.new_empty(T, B, H)
    cs = ax.new_empty(T, B, H)
    stats = ax.new_empty(T, B, 6, dtype=torch.float32)
    w_hT = w_h.t()
    HH, AX, HS, CS, ST = (t.unbind(0) for t in (hh, ax, hs, cs, stats))  # views made once
    h, c = h0, c0
    kernel = K._ln_lstm_fwd[(B,)]
    for t in range(T):
        torch.mm(h, w_hT, out=HH[t])
        kernel(
            HH[t],
            AX[t],
            c,
            *params,
            HS[t],
            CS[t],
            ST[t],
            G,
            G,
            c.stride(0),
            H,
            eps,
            BLOCK_H=block,
            num_warps=fwd_warps,
        )
        h, c = HS[t], CS[t]
    return hh, hs, cs, stats


def _backward(d_hs, ax, w_h, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, h0, c0, hh, hs, cs, stats):
    """The backward's launches: (d_ax, d_w_h, dparams fp32 (14H,), dh0, dc0)."""
    params = (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)
    T, B, G = ax.shape
    H = G // 4
    block, _, P, bwd_warps = launch(B, H, ax.device)
    d_hh = torch.empty_like(hh)  # ∂L/∂(h_{t-1} W_hᵀ) per step
    d_ax = torch.empty_like(ax)
    part = ax.new_empty(B, 14 * H, dtype=torch.float32)  # [dγ_h | dγ_x | db | dγ_c | dβ_c] per row
    dh = torch.empty_like(h0)
    dc, dc_prev = torch.zeros_like(c0), torch.empty_like(c0)  # ping-pong: a launch reads one, writes one
    DHH, DAX, AX, HH, CS, ST, DHS = (t.unbind(0) for t in (d_hh, d_ax, ax, hh, cs, stats, d_hs))
    grid = (P,)
    for t in range(T - 1, -1, -1):
        if t == T - 1:
            dh_t = DHS[t]
        else:
            dh_t = torch.addmm(DHS[t], DHH[t + 1], w_h, out=dh)
        c_prev = CS[t - 1] if t > 0 else c0
        K._ln_lstm_bwd[grid](
            dh_t,
            dc,
            HH[t],
            AX[t],
            c_prev,
            *params,
            ST[t],
            DHH[t],
            DAX[t],
            dc_prev,
            part,
            G,
            G,
            c_prev.stride(0),
            B,
            H,
            BLOCK_H=block,
            ACC=t != T - 1,
            num_warps=bwd_warps,
        )
        dc, dc_prev = dc_prev, dc
    dh0 = DHH[0].mm(w_h)
    h_prev = torch.cat([h0.unsqueeze(0), hs[:-1]])
    d_w_h = d_hh.view(-1, G).t().mm(h_prev.view(-1, H))
    return d_ax, d_w_h, column_sum(part, torch.float32), dh0, dc


class _LNLSTMSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ax, w_h, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, h0, c0, eps, saving):
        params = [p.contiguous() for p in (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)]
        # One replayed CUDA graph instead of 2T launches from Python (on CUDA; see kernels.graphs).
        _, hs, _, _ = graphs.sequence_forward(
            ctx, "ln_lstm_fwd", _forward, (ax, w_h, *params, h0, c0), eps, saving, out=1
        )
        ctx.dtypes = [p.dtype for p in (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)]
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx, d_hs):
        d_ax, d_w_h, dp, dh0, dc = graphs.sequence_backward(ctx, "ln_lstm_bwd", _backward, d_hs)
        H = d_ax.shape[2] // 4
        d_gain_h, d_gain_x, d_b = dp[: 4 * H], dp[4 * H : 8 * H], dp[8 * H : 12 * H]
        d_gain_c, d_bias_c = dp[12 * H : 13 * H], dp[13 * H :]
        dt = ctx.dtypes
        # The three 4H biases add up before the gates, so they share one gradient (distinct tensors).
        return (
            d_ax,
            d_w_h,
            d_gain_h.to(dt[0]),
            d_b.to(dt[1]),
            d_gain_x.to(dt[2]),
            d_b.to(dt[3]).clone(),
            d_b.to(dt[4]).clone(),
            d_gain_c.to(dt[5]),
            d_bias_c.to(dt[6]),
            dh0,
            dc,
            None,
            None,
        )


def _check_sequence(ax, w_h, h0, c0, params) -> None:
    if ax.dim() != 3:
        raise ValueError(f"ln_lstm_sequence expects ax (T, B, 4H), got shape {tuple(ax.shape)}")
    T, B, G = ax.shape
    _check(ax[0] if T else ax.new_empty(B, G), ax[0] if T else ax.new_empty(B, G), c0, params)
    H = G // 4
    if w_h.shape != (G, H):
        raise ValueError(f"w_h must be (4H, H) = ({G}, {H}), got {tuple(w_h.shape)}")
    if h0.shape != (B, H):
        raise ValueError(f"h0 must be (B, H) = ({B}, {H}), got {tuple(h0.shape)}")
    for name, t in (("w_h", w_h), ("h0", h0)):
        if t.dtype != ax.dtype or t.device != ax.device:
            raise TypeError(
                f"{name} must match ax's dtype and device ({ax.dtype}, {ax.device}), got "
                f"{t.dtype} on {t.device}"
            )


def triton_ln_lstm_sequence(
    ax, w_h, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, h0, c0, eps: float = 1e-5
):
    """h_t for every step, (T, B, H), of an LN-LSTM over ax = x W_xᵀ (T, B, 4H); gates (f, i, o, g).

    w_h (4H, H); gain_h/bias_h/gain_x/bias_x/bias (4H,); gain_c/bias_c (H,); h0, c0 (B, H). Differentiable
    (once) with respect to all of them.
    """
    params = (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)
    assert len(params) == len(PARAM_NAMES)
    _check_sequence(ax, w_h, h0, c0, params)
    if ax.shape[0] == 0:
        return ax.new_empty(0, ax.shape[1], ax.shape[2] // 4)
    saving = torch.is_grad_enabled() and any(t.requires_grad for t in (ax, w_h, h0, c0, *params))
    return _LNLSTMSequence.apply(
        ax.contiguous(), w_h, *params, h0.contiguous(), c0.contiguous(), float(eps), saving
    )
