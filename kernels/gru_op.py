"""`triton_ln_gru_cell(...) -> h`: the fused LN-GRU step (eq. 26) as torch custom ops with autograd.

Registers `normlab::ln_gru_fwd` (one launch) and `normlab::ln_gru_bwd` (the fused backward plus one
fixed-order column sum of the parameter partials). Kernels and maths in `gru_triton.py`.
"""

# No `from __future__ import annotations`: see lstm_op.py.
import torch

from kernels import gru_triton as K
from kernels.layer_norm_op import SUPPORTED_DTYPES, column_sum
from kernels.lstm_op import CellLaunch, cell_launch

PARAM_NAMES = ("gain_zr_h", "bias_zr_h", "gain_zr_x", "bias_zr_x", "gain_wx", "bias_wx", "gain_uh", "bias_uh")


def launch(B: int, H: int, device: torch.device) -> CellLaunch:
    """The LN-GRU kernels' launches (forward ≈ 6 H-rows live per program, backward ≈ 12)."""
    return cell_launch(B, H, device, 6, 12)


def hoisted_bwd_warps(cfg: CellLaunch) -> int:
    """Warps of the sequence's (HOISTED) backward: at most 8. With 16 warps ptxas caps the hoisted build's
    registers per thread low enough that it spills (the AOT test checks registers and spills on sm_90)."""
    return min(8, cfg.bwd_warps)


def _check(acts, params) -> int:
    """H, after checking shapes, dtypes and devices (errors say what to change)."""
    zr_h, zr_x, wx, uh, h_prev = acts
    if h_prev.dim() != 2:
        raise ValueError(f"ln_gru_cell expects h_prev (B, H), got {tuple(h_prev.shape)}")
    B, H = h_prev.shape
    for name, t, want in (
        ("zr_h", zr_h, (B, 2 * H)),
        ("zr_x", zr_x, (B, 2 * H)),
        ("wx", wx, (B, H)),
        ("uh", uh, (B, H)),
    ):
        if t.shape != want:
            raise ValueError(f"{name} must be {want} for h_prev {tuple(h_prev.shape)}, got {tuple(t.shape)}")
        if t.dtype != h_prev.dtype or t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} and h_prev must share one float32/float16/bfloat16 dtype")
    for name, p in zip(PARAM_NAMES, params, strict=True):
        shape = (2 * H,) if "zr" in name else (H,)
        if p.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(p.shape)}")
        if p.device != h_prev.device:
            raise ValueError(f"{name} is on {p.device} but h_prev is on {h_prev.device}; use one device")
    return H


def _rows(t):
    return t if t.stride(-1) == 1 else t.contiguous()


@torch.library.custom_op("normlab::ln_gru_fwd", mutates_args=())
def ln_gru_fwd(
    zr_h: torch.Tensor,
    zr_x: torch.Tensor,
    wx: torch.Tensor,
    uh: torch.Tensor,
    h_prev: torch.Tensor,
    gain_zr_h: torch.Tensor,
    bias_zr_h: torch.Tensor,
    gain_zr_x: torch.Tensor,
    bias_zr_x: torch.Tensor,
    gain_wx: torch.Tensor,
    bias_wx: torch.Tensor,
    gain_uh: torch.Tensor,
    bias_uh: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(h, stats): h (B, H) in the activations' dtype; stats fp32 (B, 8) for the backward."""
    B, H = h_prev.shape
    acts = [_rows(t) for t in (zr_h, zr_x, wx, uh, h_prev)]
    params = [
        p.contiguous()
        for p in (gain_zr_h, bias_zr_h, gain_zr_x, bias_zr_x, gain_wx, bias_wx, gain_uh, bias_uh)
    ]
    h = torch.empty((B, H), dtype=h_prev.dtype, device=h_prev.device)
    stats = torch.empty((B, 8), dtype=torch.float32, device=h_prev.device)
    if B > 0:
        cfg = launch(B, H, h_prev.device)
        K._ln_gru_fwd[(B,)](
            *acts,
            *params,
            h,
            stats,
            *[t.stride(0) for t in acts],
            H,
            eps,
            BLOCK_H=cfg.BLOCK_H,
            HOISTED=False,
            num_warps=cfg.fwd_warps,
        )
    return h, stats


@ln_gru_fwd.register_fake
def _(zr_h, zr_x, wx, uh, h_prev, *rest):
    return torch.empty_like(h_prev), h_prev.new_empty((h_prev.shape[0], 8), dtype=torch.float32)


@torch.library.custom_op("normlab::ln_gru_bwd", mutates_args=())
def ln_gru_bwd(
    dh: torch.Tensor,
    zr_h: torch.Tensor,
    zr_x: torch.Tensor,
    wx: torch.Tensor,
    uh: torch.Tensor,
    h_prev: torch.Tensor,
    gain_zr_h: torch.Tensor,
    bias_zr_h: torch.Tensor,
    gain_zr_x: torch.Tensor,
    bias_zr_x: torch.Tensor,
    gain_wx: torch.Tensor,
    bias_wx: torch.Tensor,
    gain_uh: torch.Tensor,
    bias_uh: torch.Tensor,
    stats: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dzr_h, dzr_x, dwx, duh, dh_prev, dparams): dparams fp32 (10H,) in the kernel's partial layout."""
    B, H = h_prev.shape
    acts = [_rows(t) for t in (zr_h, zr_x, wx, uh, h_prev)]
    params = [
        p.contiguous()
        for p in (gain_zr_h, bias_zr_h, gain_zr_x, bias_zr_x, gain_wx, bias_wx, gain_uh, bias_uh)
    ]
    dev, dt = h_prev.device, h_prev.dtype
    dzrh, dzrx = (torch.empty((B, 2 * H), dtype=dt, device=dev) for _ in range(2))
    dwx, duh, dhp = (torch.empty((B, H), dtype=dt, device=dev) for _ in range(3))
    if B == 0:
        return dzrh, dzrx, dwx, duh, dhp, torch.zeros(10 * H, dtype=torch.float32, device=dev)
    part = torch.empty((B, 10 * H), dtype=torch.float32, device=dev)
    cfg = launch(B, H, dev)
    K._ln_gru_bwd[(cfg.programs,)](
        dh.contiguous(),
        *acts,
        *params,
        stats,
        dzrh,
        dzrx,
        dwx,
        duh,
        dhp,
        part,
        *[t.stride(0) for t in acts],
        2 * H,
        2 * H,
        H,
        H,
        B,
        H,
        BLOCK_H=cfg.BLOCK_H,
        ACC=False,
        HOISTED=False,
        num_warps=cfg.bwd_warps,
    )
    return dzrh, dzrx, dwx, duh, dhp, column_sum(part, torch.float32)


@ln_gru_bwd.register_fake
def _(dh, zr_h, zr_x, wx, uh, h_prev, *rest):
    H = h_prev.shape[1]
    return (
        torch.empty_like(zr_h),
        torch.empty_like(zr_x),
        torch.empty_like(wx),
        torch.empty_like(uh),
        torch.empty_like(h_prev),
        h_prev.new_empty(10 * H, dtype=torch.float32),
    )


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:13], output[1])


def _backward(ctx, dh, _dstats):
    saved = ctx.saved_tensors
    acts, params, stats = saved[:5], saved[5:13], saved[13]
    H = acts[4].shape[1]
    dh = torch.zeros_like(acts[4]) if dh is None else dh
    dzrh, dzrx, dwx, duh, dhp, dp = ln_gru_bwd(dh, *acts, *params, stats)
    g1 = dp[: 2 * H]
    g2 = dp[2 * H : 4 * H]
    b12 = dp[4 * H : 6 * H]
    g3, b3, g4, b4 = dp[6 * H : 7 * H], dp[7 * H : 8 * H], dp[8 * H : 9 * H], dp[9 * H :]
    grads = (g1, b12, g2, b12.clone(), g3, b3, g4, b4)  # β₁ and β₂ add up: one shared gradient
    return (dzrh, dzrx, dwx, duh, dhp, *[g.to(p.dtype) for g, p in zip(grads, params, strict=True)], None)


ln_gru_fwd.register_autograd(_backward, setup_context=_setup_context)


def triton_ln_gru_cell(
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
    """h of one LN-GRU step (eq. 26) by the fused kernels; differentiable."""
    acts = (zr_h, zr_x, wx, uh, h_prev)
    params = (gain_zr_h, bias_zr_h, gain_zr_x, bias_zr_x, gain_wx, bias_wx, gain_uh, bias_uh)
    _check(acts, params)
    h, _ = ln_gru_fwd(*acts, *params, float(eps))
    return h
