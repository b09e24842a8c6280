"""`triton_ln_gru_sequence(...) -> hs`: a whole LN-GRU recurrence (eq. 26) as one autograd node.

The GRU counterpart of `lstm_seq_op` (see there for why: per-step custom ops are bound by host time).
The caller passes ax = x [W_x; W]ᵀ for every step, (T, B, 3H) = [zr_x | wx], and the recurrent weights
stacked as w_rec = [W_h; U] (3H, H), so that

- before the loop: the input side, which does not depend on h, for all T·B rows at once (one LayerNorm
  launch each): xg = LN(zr_x) γ₂ + β₂ + β₁ and xc = LN(wx) γ₃ + β₃;
- forward, per step: one product rec_t = h_{t-1} w_recᵀ = [zr_h | uh] into a (T, B, 3H) buffer and one
  launch of the fused cell (`gru_triton._ln_gru_fwd`, HOISTED: LN(zr_h), LN(uh), z, r, ĥ, h_t, reading
  xg_t and xc_t);
- backward, per step: one launch of `_ln_gru_bwd` (ACC: each batch row's dγ₁/dγ₄/dβ₄ contributions added
  to its row of one fp32 (B, 4H) buffer, in stream order) writing ∂L/∂[zr_h | uh] into a (T, B, 3H)
  buffer and ∂L/∂xg, ∂L/∂xc into their own, then ∂L/∂h_{t-1} = ∂L/∂out_{t-1} + dh ⊙ (1 − z) +
  ∂L/∂rec_t · w_rec (one addmm, one add); once for the sequence: ∂L/∂w_rec as one (3H × T·B) · (T·B × H)
  product, one column sum, and the two LayerNorm backwards of the input side (∂L/∂ax, dγ₂, dβ₁₂, dγ₃, dβ₃).

Deterministic (no atomics); the fused cell's launch configurations (`gru_op.launch`, cached per
shape); not twice differentiable.

On CUDA both loops (`_forward`, `_backward`) replay as CUDA graphs through `kernels.graphs`, exactly as
`lstm_seq_op` describes (the backward reading the forward graph's lent buffers).
"""

# No `from __future__ import annotations`, like the other op modules (older torch, e.g. 2.11, needs them).
import torch
from torch.autograd.function import once_differentiable

from kernels import graphs
from kernels import gru_triton as K
from kernels.gru_op import _check, hoisted_bwd_warps, launch
from kernels.layer_norm_op import backward_into, column_sum, forward_into


def _blocks(t: torch.Tensor, H: int) -> tuple:
    """Per-step views of a (T, B, 3H) buffer's [0, 2H) and [2H, 3H) column blocks (row stride 3H)."""
    return t[..., : 2 * H].unbind(0), t[..., 2 * H :].unbind(0)


def _input_side(ax, g1, b1, g2, b2, g3, b3, eps):
    """(xg, xc, stats): xg = LN(zr_x) γ₂ + β₂ + β₁ (T, B, 2H) and xc = LN(wx) γ₃ + β₃ (T, B, H) for all T·B
    rows, one LayerNorm launch each, in ax's dtype; stats fp32 (4, T·B): their μ and rstd."""
    T, B, G = ax.shape
    H = G // 3
    M = T * B
    xg = ax.new_empty(T, B, 2 * H)
    xc = ax.new_empty(T, B, H)
    stats = ax.new_empty(4, M, dtype=torch.float32)
    rows = ax.view(M, G)
    forward_into(rows[:, : 2 * H], g2.float(), b2.float() + b1.float(), eps, xg, stats[0], stats[1])
    forward_into(rows[:, 2 * H :], g3.float(), b3.float(), eps, xc, stats[2], stats[3])
    return xg, xc, stats


def _forward(ax, w_rec, g1, b1, g2, b2, g3, b3, g4, b4, h0, *, eps):
    """The recurrence's launches: (rec, hs, stats, xg, xc, x_stats), from contiguous ax, params and h0."""
    T, B, G = ax.shape
    H = G // 3
    block, fwd_warps, _, _ = launch(B, H, ax.device)
    params = (g1, b1, g2, b2, g3, b3, g4, b4)
    xg, xc, x_stats = _input_side(ax, g1, b1, g2, b2, g3, b3, eps)  # no recurrence: once, before the loop
    rec = ax.new_empty(T, B, G)  # [zr_h | uh] = h_{t-1} w_recᵀ per step, kept for the backward
    hs = ax.new_empty(T, B, H)
    stats = ax.new_empty(T, B, 8, dtype=torch.float32)
    ZRH, UH = _blocks(rec, H)
    XG, XC = xg.unbind(0), xc.unbind(0)
    REC, HS, ST = rec.unbind(0), hs.unbind(0), stats.unbind(0)
    w_recT = w_rec.t()
    h = h0
    kernel = K._ln_gru_fwd[(B,)]
    for t in range(T):
        torch.mm(h, w_recT, out=REC[t])
        kernel(
            ZRH[t],
            XG[t],
            XC[t],
            UH[t],
            h,
            *params,
            HS[t],
            ST[t],
            G,
            2 * H,
            H,
            G,
            h.stride(0),
            H,
            eps,
            BLOCK_H=block,
            HOISTED=True,
            num_warps=fwd_warps,
        )
        h = HS[t]
    return rec, hs, stats, xg, xc, x_stats


def _backward(d_hs, ax, w_rec, g1, b1, g2, b2, g3, b3, g4, b4, h0, rec, hs, stats, xg, xc, x_stats):
    """The backward's launches: (d_ax, d_w_rec, dparams fp32 (4H,) = [dγ₁ | dγ₄ | dβ₄], dγ₂, dβ₁₂, dγ₃,
    dβ₃, dh0)."""
    params = (g1, b1, g2, b2, g3, b3, g4, b4)
    T, B, G = ax.shape
    H = G // 3
    M = T * B
    cfg = launch(B, H, ax.device)
    block, P, bwd_warps = cfg.BLOCK_H, cfg.programs, hoisted_bwd_warps(cfg)
    d_rec = torch.empty_like(rec)  # ∂L/∂[zr_h | uh] per step
    d_xg = torch.empty_like(xg)  # ∂L/∂xg = the gates' da per step
    d_xc = torch.empty_like(xc)  # ∂L/∂xc per step
    part = ax.new_empty(B, 4 * H, dtype=torch.float32)
    dh = torch.empty_like(h0)  # ∂L/∂h_t read by the step's launch
    dhp = torch.empty_like(h0)  # its direct part dh ⊙ (1 − z), written by the launch
    DZRH, DUH = _blocks(d_rec, H)
    ZRH, UH = _blocks(rec, H)
    XG, XC, DXG, DXC = xg.unbind(0), xc.unbind(0), d_xg.unbind(0), d_xc.unbind(0)
    DREC, HS, ST, DHS = d_rec.unbind(0), hs.unbind(0), stats.unbind(0), d_hs.unbind(0)
    grid = (P,)
    dh_t = DHS[T - 1]
    for t in range(T - 1, -1, -1):
        h_prev = HS[t - 1] if t > 0 else h0
        K._ln_gru_bwd[grid](
            dh_t,
            ZRH[t],
            XG[t],
            XC[t],
            UH[t],
            h_prev,
            *params,
            ST[t],
            DZRH[t],
            DXG[t],
            DXC[t],
            DUH[t],
            dhp,
            part,
            G,
            2 * H,
            H,
            G,
            h_prev.stride(0),
            G,
            2 * H,
            H,
            G,
            B,
            H,
            BLOCK_H=block,
            ACC=t != T - 1,
            HOISTED=True,
            num_warps=bwd_warps,
        )
        if t > 0:
            dh_t = torch.addmm(DHS[t - 1], DREC[t], w_rec, out=dh).add_(dhp)
    dh0 = torch.addmm(dhp, DREC[0], w_rec)
    h_prev_all = torch.cat([h0.unsqueeze(0), hs[:-1]])
    d_w_rec = d_rec.view(-1, G).t().mm(h_prev_all.view(-1, H))
    # the input side's backward, once for all T·B rows: ∂L/∂ax's two blocks and their LN parameters
    rows = ax.view(M, G)
    d_zr_x = torch.empty_like(xg)
    d_wx = torch.empty_like(xc)
    dg2, db12 = backward_into(
        d_xg.view(M, 2 * H),
        rows[:, : 2 * H],
        g2.float(),
        x_stats[0],
        x_stats[1],
        d_zr_x,
        True,
        torch.float32,
    )
    dg3, db3 = backward_into(
        d_xc.view(M, H), rows[:, 2 * H :], g3.float(), x_stats[2], x_stats[3], d_wx, True, torch.float32
    )
    d_ax = torch.cat([d_zr_x, d_wx], dim=2)
    return d_ax, d_w_rec, column_sum(part, torch.float32), dg2, db12, dg3, db3, dh0


class _LNGRUSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ax, w_rec, g1, b1, g2, b2, g3, b3, g4, b4, h0, eps, saving, cuda_graphs):
        params = [p.contiguous() for p in (g1, b1, g2, b2, g3, b3, g4, b4)]
        # One replayed CUDA graph instead of 2T launches from Python (on CUDA; see kernels.graphs).
        hs = graphs.sequence_forward(
            ctx, "ln_gru_fwd", _forward, (ax, w_rec, *params, h0), eps, saving, out=1, enabled=cuda_graphs
        )[1]
        ctx.dtypes = [p.dtype for p in (g1, b1, g2, b2, g3, b3, g4, b4)]
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx, d_hs):
        d_ax, d_w_rec, dp, g2, b12, g3, b3, dh0 = graphs.sequence_backward(ctx, "ln_gru_bwd", _backward, d_hs)
        H = d_ax.shape[2] // 3
        g1, g4, b4 = dp[: 2 * H], dp[2 * H : 3 * H], dp[3 * H :]
        grads = (g1, b12, g2, b12.clone(), g3, b3, g4, b4)  # β₁ and β₂ add up: one shared gradient
        return (
            d_ax,
            d_w_rec,
            *[g.to(d) for g, d in zip(grads, ctx.dtypes, strict=True)],
            dh0,
            None,
            None,
            None,
        )


def _check_sequence(ax, w_rec, h0, params) -> None:
    if ax.dim() != 3 or ax.shape[2] % 3:
        raise ValueError(
            f"ln_gru_sequence expects ax (T, B, 3H) = [W_x x | W x], got shape {tuple(ax.shape)}"
        )
    T, B, G = ax.shape
    H = G // 3
    if h0.shape != (B, H):
        raise ValueError(f"h0 must be (B, H) = ({B}, {H}), got {tuple(h0.shape)}")
    step = ax[0] if T else ax.new_empty(B, G)
    _check((step[:, : 2 * H], step[:, : 2 * H], step[:, 2 * H :], step[:, 2 * H :], h0), params)
    if w_rec.shape != (G, H):
        raise ValueError(f"w_rec must be [W_h; U] of shape (3H, H) = ({G}, {H}), got {tuple(w_rec.shape)}")
    if w_rec.dtype != ax.dtype or w_rec.device != ax.device:
        raise TypeError(
            f"w_rec must match ax's dtype and device ({ax.dtype}, {ax.device}), got "
            f"{w_rec.dtype} on {w_rec.device}"
        )


def triton_ln_gru_sequence(
    ax,
    w_rec,
    gain_zr_h,
    bias_zr_h,
    gain_zr_x,
    bias_zr_x,
    gain_wx,
    bias_wx,
    gain_uh,
    bias_uh,
    h0,
    eps: float = 1e-5,
    *,
    cuda_graphs: bool = True,
):
    """h_t for every step, (T, B, H), of an LN-GRU (eq. 26, gates z, r) over ax = x [W_x; W]ᵀ (T, B, 3H).

    w_rec = [W_h; U] (3H, H); gain/bias of LN(zr_h), LN(zr_x) (2H,), of LN(wx), LN(uh) (H,); h0 (B, H).
    Differentiable (once) with respect to all of them. `cuda_graphs` False: eager launches (kernels.graphs).
    """
    params = (gain_zr_h, bias_zr_h, gain_zr_x, bias_zr_x, gain_wx, bias_wx, gain_uh, bias_uh)
    _check_sequence(ax, w_rec, h0, params)
    if ax.shape[0] == 0:
        return ax.new_empty(0, ax.shape[1], ax.shape[2] // 3)
    saving = torch.is_grad_enabled() and any(t.requires_grad for t in (ax, w_rec, h0, *params))
    return _LNGRUSequence.apply(
        ax.contiguous(), w_rec, *params, h0.contiguous(), float(eps), saving, cuda_graphs
    )
