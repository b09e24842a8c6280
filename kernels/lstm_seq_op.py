"""`triton_ln_lstm_sequence(...) -> hs`: a whole LN-LSTM recurrence (eq. 20) as one autograd node.

The per-step cell of `lstm_op` pays, on every step, a torch custom-op dispatch, an autograd node, a
fixed-order column sum of the parameter partials and fresh allocations: tens of µs of host time per
call, so a 64-step LN-LSTM stepped cell by cell is many times slower than cuDNN's `nn.LSTM` although each
kernel takes microseconds. Here the time loop runs inside one `torch.autograd.Function`:

- before the loop: the input side, which does not depend on h, for all T·B rows at once:
  xn = LN(ax) γ_x + β_x + β_h + b by one LayerNorm launch (the caller passes ax = x W_xᵀ, one product);
- forward, per step: one product hh_t = h_{t-1} W_hᵀ written into a (T, B, 4H) buffer, and one launch
  of the fused cell kernel (`lstm_triton._ln_lstm_fwd`, HOISTED: LN(hh_t) γ_h + xn_t, gates, c_t, LN(c_t),
  h_t) writing h_t, c_t and the row statistics into preallocated (T, B, ·) buffers;
- backward, per step: ∂L/∂h_t = ∂L/∂out_t + ∂L/∂hh_{t+1} W_h (one addmm) and one launch of the fused
  backward (`_ln_lstm_bwd` with ACC: each batch row's dγ_h/dγ_c/dβ_c contributions are added to its own
  row of one fp32 (B, 6H) buffer, step after step in stream order, so no per-step reduction; the gates'
  da = ∂L/∂xn_t into a (T, B, 4H) buffer); then, once for the whole sequence, dW_h as one
  (4H × T·B) · (T·B × H) product, one fixed-order column sum of the partials, and one LayerNorm backward
  over the T·B rows of ax (∂L/∂ax, dγ_x and db = dβ_h = dβ_x = Σ da). Deterministic for a given device
  and shape: no atomics anywhere.

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

# No `from __future__ import annotations`, like the other op modules (older torch, e.g. 2.11, needs them).
import torch
from torch.autograd.function import once_differentiable

from kernels import graphs
from kernels import lstm_triton as K
from kernels.layer_norm_op import backward_into, column_sum, forward_into
from kernels.lstm_op import PARAM_NAMES, _check, launch


def _input_side(ax, gain_x, bias_x, bias_h, bias, eps):
    """(xn, stats): xn = LN(ax) γ_x + β_x + β_h + b for all T·B rows, (T, B, 4H) in ax's dtype, by one
    LayerNorm launch; stats fp32 (2, T·B): its μ and rstd. γ and the summed β are read in fp32."""
    T, B, G = ax.shape
    xn = torch.empty_like(ax)
    stats = ax.new_empty(2, T * B, dtype=torch.float32)
    beta = bias_x.float() + bias_h.float() + bias.float()
    forward_into(ax.view(T * B, G), gain_x.float(), beta, eps, xn, stats[0], stats[1])
    return xn, stats


def _forward(ax, w_h, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, h0, c0, *, eps):
    """The recurrence's launches: (hh, hs, cs, stats, xn, x_stats), from contiguous ax, params, h0, c0."""
    T, B, G = ax.shape
    H = G // 4
    block, fwd_warps, _, _ = launch(B, H, ax.device)
    params = (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)
    xn, x_stats = _input_side(ax, gain_x, bias_x, bias_h, bias, eps)  # no recurrence: once, before the loop
    hh = ax.new_empty(T, B, G)  # raw h_{t-1} W_hᵀ per step, kept for the backward
    hs = ax.new_empty(T, B, H)
    cs = ax.new_empty(T, B, H)
    stats = ax.new_empty(T, B, 6, dtype=torch.float32)
    w_hT = w_h.t()
    HH, XN, HS, CS, ST = (t.unbind(0) for t in (hh, xn, hs, cs, stats))  # views made once
    h, c = h0, c0
    kernel = K._ln_lstm_fwd[(B,)]
    for t in range(T):
        torch.mm(h, w_hT, out=HH[t])
        kernel(
            HH[t],
            XN[t],
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
            HOISTED=True,
            num_warps=fwd_warps,
        )
        h, c = HS[t], CS[t]
    return hh, hs, cs, stats, xn, x_stats


def _backward(
    d_hs,
    ax,
    w_h,
    gain_h,
    bias_h,
    gain_x,
    bias_x,
    bias,
    gain_c,
    bias_c,
    h0,
    c0,
    hh,
    hs,
    cs,
    stats,
    xn,
    x_stats,
):
    """The backward's launches: (d_ax, d_w_h, dparams fp32 (6H,) = [dγ_h | dγ_c | dβ_c], dγ_x, db, dh0,
    dc0)."""
    params = (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)
    T, B, G = ax.shape
    H = G // 4
    block, _, P, bwd_warps = launch(B, H, ax.device)
    d_hh = torch.empty_like(hh)  # ∂L/∂(h_{t-1} W_hᵀ) per step
    d_xn = torch.empty_like(ax)  # ∂L/∂xn per step: the gates' da
    part = ax.new_empty(B, 6 * H, dtype=torch.float32)  # [dγ_h | dγ_c | dβ_c] per row
    dh = torch.empty_like(h0)
    dc, dc_prev = torch.zeros_like(c0), torch.empty_like(c0)  # ping-pong: a launch reads one, writes one
    DHH, DXN, XN, HH, CS, ST, DHS = (t.unbind(0) for t in (d_hh, d_xn, xn, hh, cs, stats, d_hs))
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
            XN[t],
            c_prev,
            *params,
            ST[t],
            DHH[t],
            DXN[t],
            dc_prev,
            part,
            G,
            G,
            c_prev.stride(0),
            B,
            H,
            BLOCK_H=block,
            ACC=t != T - 1,
            HOISTED=True,
            num_warps=bwd_warps,
        )
        dc, dc_prev = dc_prev, dc
    dh0 = DHH[0].mm(w_h)
    h_prev = torch.cat([h0.unsqueeze(0), hs[:-1]])
    d_w_h = d_hh.view(-1, G).t().mm(h_prev.view(-1, H))
    # the input side's backward, once for all T·B rows: ∂L/∂ax, dγ_x and db = Σ da (= dβ_h = dβ_x)
    d_ax = torch.empty_like(ax)
    ax2 = ax.view(T * B, G)
    d_gain_x, d_b = backward_into(
        d_xn.view(T * B, G), ax2, gain_x.float(), x_stats[0], x_stats[1], d_ax, True, torch.float32
    )
    return d_ax, d_w_h, column_sum(part, torch.float32), d_gain_x, d_b, dh0, dc


class _LNLSTMSequence(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, ax, w_h, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, h0, c0, eps, saving, cuda_graphs
    ):
        params = [p.contiguous() for p in (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)]
        # One replayed CUDA graph instead of 2T launches from Python (on CUDA; see kernels.graphs).
        hs = graphs.sequence_forward(
            ctx,
            "ln_lstm_fwd",
            _forward,
            (ax, w_h, *params, h0, c0),
            eps,
            saving,
            out=1,
            enabled=cuda_graphs,
        )[1]
        ctx.dtypes = [p.dtype for p in (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)]
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx, d_hs):
        d_ax, d_w_h, dp, d_gain_x, d_b, dh0, dc = graphs.sequence_backward(
            ctx, "ln_lstm_bwd", _backward, d_hs
        )
        H = d_ax.shape[2] // 4
        d_gain_h, d_gain_c, d_bias_c = dp[: 4 * H], dp[4 * H : 5 * H], dp[5 * H :]
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
    ax,
    w_h,
    gain_h,
    bias_h,
    gain_x,
    bias_x,
    bias,
    gain_c,
    bias_c,
    h0,
    c0,
    eps: float = 1e-5,
    *,
    cuda_graphs=True,
):
    """h_t for every step, (T, B, H), of an LN-LSTM over ax = x W_xᵀ (T, B, 4H); gates (f, i, o, g).

    w_h (4H, H); gain_h/bias_h/gain_x/bias_x/bias (4H,); gain_c/bias_c (H,); h0, c0 (B, H). Differentiable
    (once) with respect to all of them. `cuda_graphs` False: eager launches (see kernels.graphs).
    """
    params = (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)
    assert len(params) == len(PARAM_NAMES)
    _check_sequence(ax, w_h, h0, c0, params)
    if ax.shape[0] == 0:
        return ax.new_empty(0, ax.shape[1], ax.shape[2] // 4)
    saving = torch.is_grad_enabled() and any(t.requires_grad for t in (ax, w_h, h0, c0, *params))
    return _LNLSTMSequence.apply(
        ax.contiguous(), w_h, *params, h0.contiguous(), c0.contiguous(), float(eps), saving, cuda_graphs
    )
