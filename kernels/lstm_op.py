"""`triton_ln_lstm_cell(...) -> (h, c)`: the fused LN-LSTM step as torch custom ops with autograd.

Registers `normlab::ln_lstm_fwd` (one kernel launch) and `normlab::ln_lstm_bwd` (the fused backward plus
one fixed-order column sum of the parameter partials), with fake implementations for torch.compile.
Launch heuristics and shape checks live here; the kernels and their maths in `lstm_triton.py`.
"""

# No `from __future__ import annotations`: older torch (e.g. 2.11) infers custom-op schemas more
# reliably from real annotation objects.
import functools
from typing import NamedTuple

import torch
import triton

from kernels import lstm_triton as K
from kernels.layer_norm_op import SUPPORTED_DTYPES, column_sum, persistent_programs, warps_for


class CellLaunch(NamedTuple):
    """The launches of a fused recurrent cell (lstm_op, gru_op and their sequences)."""

    BLOCK_H: int
    fwd_warps: int
    programs: int  # the backward's persistent grid (rows pid, pid + programs, …)
    bwd_warps: int


@functools.lru_cache(maxsize=256)
def cell_launch(B: int, H: int, device: torch.device, fwd_rows: int, bwd_rows: int) -> CellLaunch:
    """For a cell whose forward holds about `fwd_rows` and backward `bwd_rows` fp32 rows of BLOCK_H values
    per program (the backward capped at 16 warps)."""
    block = triton.next_power_of_2(H)
    return CellLaunch(
        block,
        warps_for(fwd_rows * block),
        max(1, min(B, persistent_programs(device))),
        min(16, warps_for(bwd_rows * block)),
    )


PARAM_NAMES = ("gain_h", "bias_h", "gain_x", "bias_x", "bias", "gain_c", "bias_c")


def launch(B: int, H: int, device: torch.device) -> CellLaunch:
    """The LN-LSTM kernels' launches (forward ≈ 8 H-rows live per program, backward ≈ 16)."""
    return cell_launch(B, H, device, 8, 16)


def _check(hh, xx, c_prev, params) -> int:
    """H, after checking shapes, dtypes and devices (errors say what to change)."""
    if hh.dim() != 2 or c_prev.dim() != 2:
        raise ValueError(
            f"ln_lstm_cell expects hh (B, 4H) and c_prev (B, H), got {tuple(hh.shape)} "
            f"and {tuple(c_prev.shape)}"
        )
    B, H = c_prev.shape
    if hh.shape != (B, 4 * H) or xx.shape != (B, 4 * H):
        raise ValueError(
            f"hh and xx must be (B, 4H) = ({B}, {4 * H}) for c_prev {tuple(c_prev.shape)}, "
            f"got {tuple(hh.shape)} and {tuple(xx.shape)}"
        )
    if hh.dtype not in SUPPORTED_DTYPES or xx.dtype != hh.dtype or c_prev.dtype != hh.dtype:
        raise TypeError(
            f"hh, xx, c_prev must share one float32/float16/bfloat16 dtype, got {hh.dtype}, "
            f"{xx.dtype}, {c_prev.dtype}"
        )
    for name, p in zip(PARAM_NAMES, params, strict=True):
        want = (H,) if name.endswith("_c") else (4 * H,)
        if p.shape != want:
            raise ValueError(f"{name} must have shape {want}, got {tuple(p.shape)}")
        if p.device != hh.device:
            raise ValueError(f"{name} is on {p.device} but hh is on {hh.device}; move them to one device")
    return H


def _lastdim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


@torch.library.custom_op("normlab::ln_lstm_fwd", mutates_args=())
def ln_lstm_fwd(
    hh: torch.Tensor,
    xx: torch.Tensor,
    c_prev: torch.Tensor,
    gain_h: torch.Tensor,
    bias_h: torch.Tensor,
    gain_x: torch.Tensor,
    bias_x: torch.Tensor,
    bias: torch.Tensor,
    gain_c: torch.Tensor,
    bias_c: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(h, c, stats): h and c (B, H) in hh's dtype; stats fp32 (B, 6) for the backward."""
    B, H = c_prev.shape
    hh, xx, c_prev = (_lastdim_contiguous(t) for t in (hh, xx, c_prev))
    params = [p.contiguous() for p in (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)]
    h = torch.empty((B, H), dtype=hh.dtype, device=hh.device)
    c = torch.empty((B, H), dtype=hh.dtype, device=hh.device)
    stats = torch.empty((B, 6), dtype=torch.float32, device=hh.device)
    if B > 0:
        cfg = launch(B, H, hh.device)
        K._ln_lstm_fwd[(B,)](
            hh,
            xx,
            c_prev,
            *params,
            h,
            c,
            stats,
            hh.stride(0),
            xx.stride(0),
            c_prev.stride(0),
            H,
            eps,
            BLOCK_H=cfg.BLOCK_H,
            HOISTED=False,
            num_warps=cfg.fwd_warps,
        )
    return h, c, stats


@ln_lstm_fwd.register_fake
def _(hh, xx, c_prev, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, eps):
    B = c_prev.shape[0]
    return (
        torch.empty_like(c_prev, dtype=hh.dtype),
        torch.empty_like(c_prev, dtype=hh.dtype),
        hh.new_empty((B, 6), dtype=torch.float32),
    )


@torch.library.custom_op("normlab::ln_lstm_bwd", mutates_args=())
def ln_lstm_bwd(
    dh: torch.Tensor,
    dc: torch.Tensor,
    hh: torch.Tensor,
    xx: torch.Tensor,
    c_prev: torch.Tensor,
    gain_h: torch.Tensor,
    bias_h: torch.Tensor,
    gain_x: torch.Tensor,
    bias_x: torch.Tensor,
    bias: torch.Tensor,
    gain_c: torch.Tensor,
    bias_c: torch.Tensor,
    stats: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dhh, dxx, dc_prev, dparams): dparams fp32 (14H,) = [dγ_h | dγ_x | db | dγ_c | dβ_c]."""
    B, H = c_prev.shape
    hh, xx, c_prev = (_lastdim_contiguous(t) for t in (hh, xx, c_prev))
    dh, dc = dh.contiguous(), dc.contiguous()
    params = [p.contiguous() for p in (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)]
    dhh = torch.empty((B, 4 * H), dtype=hh.dtype, device=hh.device)
    dxx = torch.empty((B, 4 * H), dtype=hh.dtype, device=hh.device)
    dcp = torch.empty((B, H), dtype=hh.dtype, device=hh.device)
    if B == 0:
        return dhh, dxx, dcp, torch.zeros(14 * H, dtype=torch.float32, device=hh.device)
    cfg = launch(B, H, hh.device)
    part = torch.empty((B, 14 * H), dtype=torch.float32, device=hh.device)
    K._ln_lstm_bwd[(cfg.programs,)](
        dh,
        dc,
        hh,
        xx,
        c_prev,
        *params,
        stats,
        dhh,
        dxx,
        dcp,
        part,
        hh.stride(0),
        xx.stride(0),
        c_prev.stride(0),
        B,
        H,
        BLOCK_H=cfg.BLOCK_H,
        ACC=False,
        HOISTED=False,
        num_warps=cfg.bwd_warps,
    )
    return dhh, dxx, dcp, column_sum(part, torch.float32)


@ln_lstm_bwd.register_fake
def _(dh, dc, hh, xx, c_prev, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, stats):
    H = c_prev.shape[1]
    return (
        torch.empty_like(hh),
        torch.empty_like(xx),
        torch.empty_like(c_prev),
        hh.new_empty(14 * H, dtype=torch.float32),
    )


def _setup_context(ctx, inputs, output):
    hh, xx, c_prev, *params, _eps = inputs
    ctx.save_for_backward(hh, xx, c_prev, *params, output[2])


def _backward(ctx, dh, dc, _dstats):
    hh, xx, c_prev, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, stats = ctx.saved_tensors
    H = c_prev.shape[1]
    dh = torch.zeros_like(c_prev) if dh is None else dh
    dc = torch.zeros_like(c_prev) if dc is None else dc
    dhh, dxx, dcp, dp = ln_lstm_bwd(
        dh, dc, hh, xx, c_prev, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, stats
    )
    d_gain_h, d_gain_x, d_b = dp[: 4 * H], dp[4 * H : 8 * H], dp[8 * H : 12 * H]
    d_gain_c, d_bias_c = dp[12 * H : 13 * H], dp[13 * H :]
    # The three 4H biases add up before the gates, so they share one gradient.
    return (
        dhh,
        dxx,
        dcp,
        d_gain_h.to(gain_h.dtype),
        d_b.to(bias_h.dtype),
        d_gain_x.to(gain_x.dtype),
        d_b.to(bias_x.dtype).clone(),
        d_b.to(bias.dtype).clone(),
        d_gain_c.to(gain_c.dtype),
        d_bias_c.to(bias_c.dtype),
        None,
    )


ln_lstm_fwd.register_autograd(_backward, setup_context=_setup_context)


def triton_ln_lstm_cell(
    hh, xx, c_prev, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, eps: float = 1e-5
):
    """(h, c) of one LN-LSTM step by the fused kernels (eq. 20, gates f, i, o, g); differentiable."""
    params = (gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c)
    _check(hh, xx, c_prev, params)
    h, c, _ = ln_lstm_fwd(hh, xx, c_prev, *params, float(eps))
    return h, c
