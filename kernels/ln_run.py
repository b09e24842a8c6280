"""The launch functions of the LayerNorm kernels: the only code that launches them (custom ops and eager).

`_forward_into` and `_backward_into` fill caller-allocated outputs from (M, N) rows, with the launches
that `ln_launch` works out per shape; every kernel launches through a `Launcher` (its compiled kernel kept
per specialization key and its C launcher called directly, kernels/launcher.py), not Triton's JIT binder
on every call. On a GPU a persistent kernel's grid is one wave of co-resident programs, sized once per
(launch, dtypes, device) from the compiled kernel's registers and shared memory (`_persistent_grid`).
"""

# No `from __future__ import annotations`, like the op modules (torch 2.11 on the GPU machine).
import torch
import triton

from kernels import ln_bwd_triton as KB
from kernels import ln_split_triton as KS
from kernels import ln_triton as K
from kernels.launcher import Launcher
from kernels.ln_launch import (
    TIERS,
    Launch,
    _bwd_launch,
    _fwd_launch,
    _sum_launch,
    co_resident,
    persistent_programs,
    resident_grid,
    sm_of,
    warps_for,
)

# (the count is each kernel's leading tensor arguments)
LAUNCHERS = {
    name: Launcher(getattr(mod, name), tensors, name)
    for mod, name, tensors in (
        (K, "_ln_fwd_resident", 6),
        (K, "_ln_fwd_shifted", 6),
        (K, "_ln_fwd_looped", 6),
        (KB, "_ln_bwd_resident", 8),
        (KB, "_ln_bwd_shifted", 8),
        (KS, "_ln_bwd_split_stats", 8),
        (KS, "_ln_bwd_split_dx", 7),
        (KB, "_column_sum", 3),
    )
}


def _forward_into(
    x2: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    tier: int,
    y: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
) -> None:
    """Fills y (row-major, M·N elements, any shape) and the fp32 (M,) mean / rstd from the rows x2; weight
    and bias have a unit stride."""
    M, N = x2.shape
    if M == 0:
        return
    cfg = _fwd_launch(M, N, tier)
    has_w, has_b = weight is not None, bias is not None
    w = weight if has_w else x2  # a dummy pointer when absent
    b = bias if has_b else x2
    if cfg.kernel == "shifted":
        if x2.stride(0) == N and x2.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0:
            LAUNCHERS["_ln_fwd_shifted"](
                (cfg.grid,),
                (x2, y, w, b, mean, rstd, N, N, M, N, eps),
                (cfg, has_w, has_b),
                BLOCK_A=cfg.TILES[0],
                BLOCK_B=cfg.TILES[1],
                BLOCK_C=cfg.TILES[2],
                VEC=16 // x2.element_size(),
                HAS_W=has_w,
                HAS_B=has_b,
                num_warps=cfg.num_warps,
            )
            return
        cfg = cfg._replace(kernel="resident")  # same launch, one row per program
    args = (x2, y, w, b, mean, rstd, x2.stride(0), N, M, N, eps)
    if cfg.kernel == "resident":
        LAUNCHERS["_ln_fwd_resident"](
            (cfg.grid,),
            args,
            (cfg, has_w, has_b),
            BLOCK_N=cfg.BLOCK_N,
            ROWS=cfg.ROWS,
            HAS_W=has_w,
            HAS_B=has_b,
            num_warps=cfg.num_warps,
        )
    else:  # persistent: one wave of co-resident programs on a GPU (see _ln_fwd_looped)
        meta = {"BLOCK_N": cfg.BLOCK_N, "HAS_W": has_w, "HAS_B": has_b, "num_warps": cfg.num_warps}
        P = _persistent_grid("_ln_fwd_looped", cfg, M, args, (cfg, has_w, has_b), meta, x2)
        LAUNCHERS["_ln_fwd_looped"]((P,), args, (cfg, has_w, has_b), **meta)


def _sum_into(part: torch.Tensor, slabs: int, P: int, N: int, out: torch.Tensor, out2: torch.Tensor) -> None:
    """One launch: out = Σ_p part[0, p, :] and, when slabs = 2, out2 = Σ_p part[1, p, :]; part is a
    contiguous fp32 buffer of slabs·P·N elements (any shape), out / out2 any float dtype."""
    cfg = _sum_launch(P, N, slabs, part.device)
    LAUNCHERS["_column_sum"](
        cfg.grid,
        (part, out, out2, P, N),
        cfg,
        BLOCK_P=cfg.BLOCK_P,
        BLOCK_C=cfg.BLOCK_C,
        num_warps=cfg.num_warps,
    )


def column_sum(part: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Σ over the rows of a contiguous fp32 (P, N) partial buffer, in a fixed order, cast to `dtype`."""
    P, N = part.shape
    out = torch.empty(N, dtype=dtype, device=part.device)
    _sum_into(part, 1, P, N, out, out)
    return out


_BWD_KERNEL = {"resident": "_ln_bwd_resident", "shifted": "_ln_bwd_shifted", "split": "_ln_bwd_split_stats"}


def _bwd_meta(cfg: Launch, x2: torch.Tensor, has_w: bool, has_b: bool) -> dict:
    """The constexprs and options of one backward launch (the split tier's first kernel)."""
    meta = {"HAS_W": has_w, "HAS_B": has_b, "STAGES": cfg.STAGES, "num_warps": cfg.num_warps}
    if cfg.kernel == "split":
        meta["BLOCK_S"] = cfg.BLOCK_N
        return meta
    if cfg.kernel == "shifted":
        meta.update(zip(("BLOCK_A", "BLOCK_B", "BLOCK_C"), cfg.TILES, strict=True))
        meta["VEC"] = 16 // x2.element_size()
    else:
        meta["BLOCK_N"] = cfg.BLOCK_N
        meta["ROWS"] = cfg.ROWS
    return meta


_GRIDS: dict = {}  # (kernel, launch, flags, dtypes, device) -> a persistent grid P on that GPU


def _persistent_grid(
    name: str, cfg: Launch, M: int, args: tuple, meta_key, meta: dict, x2: torch.Tensor
) -> int:
    """A persistent kernel's grid P: on a GPU, as many programs as are co-resident (from the compiled
    kernel's registers and shared memory: one wave, and for the backward no partial slab larger than
    needed), else cfg.grid. Fixed per (launch, dtypes, device): the fixed-order dγ/dβ sums stay bitwise
    repeatable."""
    if x2.device.type != "cuda":  # the interpreter: a few programs, each looping over several rows
        return min(cfg.grid, persistent_programs(x2.device))
    key = (name, meta_key, args[0].dtype, args[2].dtype, x2.device)
    P = _GRIDS.get(key)
    if P is None:
        ck = LAUNCHERS[name].warmup(args, meta_key, **meta)
        sm = sm_of(x2.device)
        blocks = co_resident(ck.n_regs, cfg.num_warps, ck.metadata.shared, sm) if ck is not None else 2
        P = _GRIDS[key] = resident_grid(cfg, M, blocks, sm.count)
    return P


def _backward_into(
    dy2: torch.Tensor,
    x2: torch.Tensor,
    weight: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    dx: torch.Tensor,
    has_bias: bool,
    bias_dtype: torch.dtype,
    tier: int,
) -> tuple:
    """Fills dx (row-major, M·N elements, any shape); returns (dweight or None, dbias or None), summed
    from one fp32 (S, P, N) partial buffer (S = 1 or 2, never zero-filled) by one `_column_sum` launch."""
    M, N = x2.shape
    has_w = weight is not None
    dev = x2.device
    if M == 0:
        return (
            torch.zeros(N, dtype=weight.dtype, device=dev) if has_w else None,
            torch.zeros(N, dtype=bias_dtype, device=dev) if has_bias else None,
        )
    cfg = _bwd_launch(M, N, dev, tier)
    if cfg.kernel == "shifted" and not (
        dy2.stride(0) == x2.stride(0) == N
        and dy2.data_ptr() % 16 == 0
        and x2.data_ptr() % 16 == 0
        and dx.data_ptr() % 16 == 0
    ):
        cfg = _bwd_launch(M, N, dev, TIERS["resident"])  # rows that do not share one alignment
    w = weight if has_w else x2
    split = cfg.kernel == "split"
    # the split tier's (M, K, 2) pairs buffer stands where the others take their dx (same position)
    pairs = torch.empty((M, cfg.SEGMENTS, 2), dtype=torch.float32, device=dev) if split else None
    out = pairs if split else dx
    strides = (dy2.stride(0), x2.stride(0), M, N) if split else (dy2.stride(0), x2.stride(0), N, M, N)
    meta = _bwd_meta(cfg, x2, has_w, has_bias)
    name = _BWD_KERNEL[cfg.kernel]
    # The grid is sized on a compile with dummy partial pointers (mean): registers do not depend on them.
    P = _persistent_grid(
        name, cfg, M, (dy2, x2, w, mean, rstd, out, mean, mean, *strides), (cfg, has_w, has_bias), meta, x2
    )
    slabs = int(has_w) + int(has_bias)
    part = torch.empty((slabs, P, N), dtype=torch.float32, device=dev) if slabs else mean
    # Slab 0 is dγ's when there is a weight, else dβ's; a dummy (mean) pointer for an absent one.
    dw_part = part if has_w else mean
    db_part = (part[1] if has_w else part) if has_bias else mean
    LAUNCHERS[name](
        (P, cfg.SEGMENTS) if split else (P,),
        (dy2, x2, w, mean, rstd, out, dw_part, db_part, *strides),
        (cfg, has_w, has_bias),
        **meta,
    )
    if split:
        K_seg = cfg.SEGMENTS
        LAUNCHERS["_ln_bwd_split_dx"](
            (M * K_seg,),
            (dy2, x2, w, mean, rstd, pairs, dx, dy2.stride(0), x2.stride(0), N, M, N, K_seg),
            (cfg, has_w),
            BLOCK_S=cfg.BLOCK_N,
            BLOCK_K=triton.next_power_of_2(K_seg),
            HAS_W=has_w,
            num_warps=warps_for(cfg.BLOCK_N),
        )
    if not slabs:
        return None, None
    dw = torch.empty(N, dtype=weight.dtype, device=dev) if has_w else None
    db = torch.empty(N, dtype=bias_dtype, device=dev) if has_bias else None
    first = dw if has_w else db
    _sum_into(part, slabs, P, N, first, db if has_w and has_bias else first)
    return dw, db
