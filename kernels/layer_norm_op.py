"""The LayerNorm's launches: heuristics, cached launch plans, and the custom op pair for torch.compile.

The kernels and their maths are in layer_norm_triton.py; the eager autograd and the measured dispatch in
layer_norm_autograd.py. Launch heuristics live here and only here: the forward takes ROWS short rows per
program or walks a long row in chunks; the backward is persistent, its grid P computed from (M, N,
device). Each (device, dtypes, M, N, weight, bias, alignment) gets one plan, built once: its launches call
the compiled kernel's runner directly after the first (launch.py). One custom op pair
(`normlab::layer_norm_fwd` / `_bwd`) carries autograd and keeps the kernels in a torch.compile graph.
"""

# No `from __future__ import annotations`: older torch infers custom-op schemas from real annotations.
import functools
from typing import NamedTuple

import torch
import triton

from kernels import layer_norm_triton as K
from kernels.launch import Launcher, PlanCache, aligned, spec

MAX_RESIDENT = 8192  # backward: widest row (next power of two) held in registers (x, ∂y, γ, two partials)
MAX_RESIDENT_FWD = 32768  # forward: a row in registers up to 32K (16–32 warps), longer ones in chunks
CHUNK = 4096  # columns per chunk (forward walk) and per segment (backward) of a long row
SMALL_ROW_ELEMS = 4096  # a forward step over short rows takes about this many elements
PREFETCH_ELEMS = 8192  # the forward prefetches the next block while a block holds at most this many
BWD_TILE_ELEMS = 2048  # a backward step over short rows (N ≤ 1024) takes about this many elements
STAGES = 3  # software-pipelining depth of the long-row and backward row loops (tl.range num_stages)
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# ---- launch heuristics: the only place that picks blocks, warps and grids ----


def warps_for(elems: int) -> int:
    """Warps for a program holding `elems` fp32 values: about 8–16 per thread."""
    if elems <= 1024:
        return 4 if elems > 256 else 1 if elems <= 64 else 2
    return 8 if elems <= 4096 else 16 if elems <= 16384 else 32


@functools.lru_cache(maxsize=8)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def persistent_programs(device: torch.device, per_sm: int = 2) -> int:
    """Programs of a persistent grid on this device: `per_sm` per SM; few on the interpreter (CPU tests)."""
    if device.type == "cuda":
        return per_sm * _sm_count(device)
    return 4


def occupancy(regs: int, num_warps: int, shared: int, sm_regs: int, sm_threads: int, sm_shared: int) -> int:
    """Programs of one compiled kernel resident on one SM: the least of its thread, register and
    shared-memory limits (registers are allocated per warp, in units of 256)."""
    threads = 32 * num_warps
    per_warp = -(-max(regs, 1) * 32 // 256) * 256
    limits = [sm_threads // threads, sm_regs // (per_warp * num_warps)]
    if shared:
        limits.append(sm_shared // shared)
    return max(1, min(limits))


def programs_per_sm(compiled, num_warps: int, device: torch.device) -> int | None:
    """occupancy() of a compiled kernel on `device`; None when its register count is unknown."""
    if compiled.run is None:  # the public launcher property loads the binary: n_regs is known from here
        return None
    regs = getattr(compiled, "n_regs", None)
    if not regs:
        return None
    props = torch.cuda.get_device_properties(device)
    shared = getattr(compiled.metadata, "shared", 0)
    return occupancy(regs, num_warps, shared, getattr(props, "regs_per_multiprocessor", 65536),
                     getattr(props, "max_threads_per_multi_processor", 2048),
                     getattr(props, "shared_memory_per_multiprocessor", 228 * 1024))  # fmt: skip


class Launch(NamedTuple):
    """One kernel's launch: its constexprs, warps, grid, rows per program (backward) and row shape."""

    meta: dict
    num_warps: int
    grid: tuple
    rows_per_program: int
    long: bool


def _prev_pow2(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def fwd_launch(M: int, N: int, device: torch.device, per_sm: int | None = None) -> Launch:
    """Short rows: ROWS per step as two power-of-two tiles (BLOCK_A ≤ N, BLOCK_B ≥ the rest); rows past
    MAX_RESIDENT_FWD walked in CHUNKs. A persistent grid of at most per_sm programs per SM (default: about
    1024 threads per SM until the compiled kernel's occupancy is known)."""
    if triton.next_power_of_2(N) > MAX_RESIDENT_FWD:
        warps = warps_for(CHUNK)
        meta = dict(BLOCK_A=CHUNK, BLOCK_B=0, ROWS=1, LONG=True, STAGES=STAGES, PREFETCH=False)
        cap = persistent_programs(device, per_sm or max(1, 32 // warps))
        return Launch(meta, warps, (max(1, min(M, cap)),), 0, True)
    a = _prev_pow2(N)
    b = triton.next_power_of_2(N - a) if N > a else 0
    rows = max(1, min(_prev_pow2(max(1, SMALL_ROW_ELEMS // (a + b))), 16, triton.next_power_of_2(M)))
    warps = warps_for((a + b) * rows)
    cap = persistent_programs(device, per_sm or max(1, 32 // warps))
    # past 8192 values a program's registers hold one block, not two: no prefetch, more programs per SM
    prefetch = (a + b) * rows <= PREFETCH_ELEMS
    meta = dict(BLOCK_A=a, BLOCK_B=b, ROWS=rows, LONG=False, STAGES=1, PREFETCH=prefetch)
    return Launch(meta, warps, (max(1, min(triton.cdiv(M, rows), cap)),), 0, False)


def bwd_launch(M: int, N: int, device: torch.device, per_sm: int | None = None) -> Launch:
    """P programs (P·segments about one wave) each over a contiguous range of rows, ROWS rows per step
    for N ≤ 1024; long rows in segments of CHUNK columns (grid (P, segments))."""
    block = triton.next_power_of_2(N)
    # rows not a multiple of 16 load element by element: past 4096 their resident backward spills
    long = block > MAX_RESIDENT or (block > CHUNK and N % 16 != 0)
    seg = CHUNK if long else block
    segments = triton.cdiv(N, seg)
    step = 1 if long else max(1, min(16, BWD_TILE_ELEMS // block))
    # x, ∂y, γ and the two partial rows stay resident: about four times the forward's registers.
    warps = min(16, warps_for(4 * seg * step))
    cap = persistent_programs(device, per_sm or max(1, 32 // warps))
    P = max(1, min(triton.cdiv(M, step), cap // segments if long else cap))
    rows = triton.cdiv(M, P)
    P = triton.cdiv(M, rows)  # no program without rows
    meta = dict(BLOCK_N=seg, ROWS=step, SEGMENTED=long, STAGES=STAGES)
    return Launch(meta, warps, (P, segments), rows, long)


def sums_launch(N: int) -> Launch:
    """The fixed-order sum of the backward's partial rows: 256 columns a program, 16 partial rows a step."""
    block = min(256, triton.next_power_of_2(N))
    return Launch(dict(BLOCK_P=16, BLOCK_N=block), 4, (triton.cdiv(N, block),), 0, False)


PLANS = PlanCache()  # launch plans: one per (device, dtypes, M, N, weight, bias, alignment)


def _sized(kernel, cfg: Launch, make, args: tuple, meta: dict, device: torch.device) -> Launch:
    """`cfg` again with the grid sized from the compiled kernel's occupancy (CUDA; compiles it now)."""
    if device.type != "cuda":
        return cfg
    compiled = kernel.warmup(*args, grid=cfg.grid, **meta)
    per_sm = None if compiled is None else programs_per_sm(compiled, cfg.num_warps, device)
    return cfg if per_sm is None else make(per_sm)


class _FwdPlan:
    """The forward's launch for one key: heuristics evaluated once, the kernel's runner after first use."""

    def __init__(self, M: int, N: int, device: torch.device, flags: dict, args: tuple) -> None:
        cfg = fwd_launch(M, N, device)
        meta = {**cfg.meta, **flags, "num_warps": cfg.num_warps}
        cfg = _sized(K._ln_fwd, cfg, lambda per_sm: fwd_launch(M, N, device, per_sm), args, meta, device)
        self.launch = Launcher(K._ln_fwd, cfg.grid, meta)


def forward_into(x2, weight, bias, eps: float, y, mean, rstd) -> None:
    """Fills y (row-major, M·N elements, any shape) and fp32 (M,) mean / rstd from the (M, N) rows x2
    (unit column stride); weight and bias have a unit stride or are None."""
    M, N = x2.shape
    if M == 0:
        return
    key = ("fwd", x2.device, x2.dtype, _dtype(weight), _dtype(bias), M, N, spec(x2.stride(0)),
           aligned(x2), aligned(weight), aligned(bias), aligned(y), aligned(mean), aligned(rstd))  # fmt: skip
    args = (x2, y, x2 if weight is None else weight, x2 if bias is None else bias, mean, rstd,
            x2.stride(0), M, N, eps)  # fmt: skip
    flags = {"HAS_W": weight is not None, "HAS_B": bias is not None}
    PLANS.get(key, lambda: _FwdPlan(M, N, x2.device, flags, args)).launch(*args)


def _dtype(t: torch.Tensor | None):
    return None if t is None else t.dtype


class _BwdPlan:
    """The backward's launches for one key: row sums for long rows, the persistent pass (its grid from
    the compiled kernel's occupancy), the fixed-order sum of the partial rows."""

    def __init__(self, M: int, N: int, device: torch.device, flags: dict, args) -> None:
        cfg = bwd_launch(M, N, device)
        meta = {**cfg.meta, **flags, "num_warps": cfg.num_warps}
        cfg = _sized(K._ln_bwd, cfg, lambda per_sm: bwd_launch(M, N, device, per_sm),
                     args(cfg.grid[0], cfg.rows_per_program), meta, device)  # fmt: skip
        self.cfg, self.P = cfg, cfg.grid[0]
        self.main = Launcher(K._ln_bwd, cfg.grid, meta)
        row_meta = dict(BLOCK_N=CHUNK, HAS_W=flags["HAS_W"], num_warps=warps_for(2 * CHUNK))
        self.rowsums = Launcher(K._ln_bwd_rowsums, (M,), row_meta) if cfg.long else None
        sums = sums_launch(N)
        self.param_sums = Launcher(
            K._ln_param_sums, sums.grid, {**sums.meta, **flags, "num_warps": sums.num_warps}
        )


def backward_into(dy2, x2, weight, mean, rstd, dx, has_bias: bool, bias_dtype) -> tuple:
    """Fills dx (row-major, M·N elements) and returns (∂γ or None, ∂β or None)."""
    M, N = x2.shape
    dev = x2.device
    has_w = weight is not None
    if M == 0:
        zeros = functools.partial(torch.zeros, N, device=dev)
        return (zeros(dtype=weight.dtype) if has_w else None, zeros(dtype=bias_dtype) if has_bias else None)
    db_dtype = bias_dtype if has_bias else None  # ∂β's pointer type is compiled into the sum kernel
    key = ("bwd", dev, x2.dtype, _dtype(weight), db_dtype, M, N, spec(dy2.stride(0)), spec(x2.stride(0)),
           aligned(dy2), aligned(x2), aligned(weight), aligned(mean), aligned(rstd), aligned(dx))  # fmt: skip
    w = weight if has_w else x2
    n_parts = int(has_w) + int(has_bias)

    def args(P: int, rows: int, part=None, rowsums=mean) -> tuple:
        if part is None:  # sizing the grid: a buffer of the default grid's shape
            part = torch.empty((n_parts, P, N), dtype=torch.float32, device=dev)
        dw_part, db_part = part[0] if has_w else mean, part[-1] if has_bias else mean
        strides = (dy2.stride(0), x2.stride(0))
        return (dy2, x2, w, mean, rstd, rowsums, dx, dw_part, db_part, *strides, M, N, rows)

    plan = PLANS.get(key, lambda: _BwdPlan(M, N, dev, {"HAS_W": has_w, "HAS_B": has_bias}, args))
    rowsums = mean
    if plan.rowsums is not None:
        rowsums = torch.empty((M, 2), dtype=torch.float32, device=dev)
        plan.rowsums(dy2, x2, w, mean, rstd, rowsums, dy2.stride(0), x2.stride(0), N)
    part = torch.empty((n_parts, plan.P, N), dtype=torch.float32, device=dev)
    plan.main(*args(plan.P, plan.cfg.rows_per_program, part, rowsums))
    if not n_parts:
        return None, None
    dw = torch.empty(N, dtype=weight.dtype, device=dev) if has_w else None
    db = torch.empty(N, dtype=bias_dtype, device=dev) if has_bias else None
    plan.param_sums(part, part if dw is None else dw, part if db is None else db, plan.P, N)
    return dw, db


def column_sum(part: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Σ over the rows of an fp32 (P, N) partial buffer in torch's fixed reduction order, cast to dtype."""
    return part.sum(0).to(dtype)


# ---- autograd: one custom op pair (torch.compile keeps them in its graph) ----


def _rows(t: torch.Tensor) -> torch.Tensor:
    """(M, N) view with a unit column stride (copies only when it has to)."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _unit(p: torch.Tensor | None) -> torch.Tensor | None:
    return p if p is None or p.stride(0) == 1 else p.contiguous()


@torch.library.custom_op("normlab::layer_norm_fwd", mutates_args=())
def layer_norm_fwd(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd): y like x (row-major); mean and rstd fp32 of shape (M,), M = x.numel() // N."""
    return _triton_forward(x, weight, bias, eps)


def _triton_forward(x, weight, bias, eps, stats=None):
    """(y, mean, rstd) by the forward kernel; `stats` an fp32 (2, M) buffer for mean and rstd, else two
    allocations (a custom op's outputs must not alias each other)."""
    x2 = _rows(x)
    M = x2.shape[0]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if stats is None:
        mean = torch.empty(M, dtype=torch.float32, device=x.device)
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    else:
        mean, rstd = stats
    forward_into(x2, _unit(weight), _unit(bias), eps, y, mean, rstd)
    return y, mean, rstd


def triton_forward(x, weight, bias, eps):
    """(y, mean, rstd) by the forward kernel, mean and rstd in one fp32 allocation (the eager path)."""
    M = x.numel() // x.shape[-1]
    return _triton_forward(x, weight, bias, eps, torch.empty((2, M), dtype=torch.float32, device=x.device))


def triton_backward(dy, x, weight, mean, rstd, has_bias: bool, bias_dtype) -> tuple:
    """(∂x, ∂γ or None, ∂β or None) by the backward kernels; dy with a unit column stride."""
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw, db = backward_into(_rows(dy), _rows(x), _unit(weight), mean, rstd, dx, has_bias, bias_dtype)
    return dx, dw, db


@layer_norm_fwd.register_fake
def _(x, weight, bias, eps):
    M = x.numel() // x.shape[-1]
    return torch.empty_like(x), x.new_empty(M, dtype=torch.float32), x.new_empty(M, dtype=torch.float32)


@torch.library.custom_op("normlab::layer_norm_bwd", mutates_args=())
def layer_norm_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    has_bias: bool,
    bias_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(∂x, ∂γ, ∂β); ∂γ / ∂β are empty tensors when γ / β are absent (custom-op outputs must not alias)."""
    dx, dw, db = triton_backward(dy, x, weight, mean, rstd, has_bias, bias_dtype)
    return dx, x.new_empty(0) if dw is None else dw, x.new_empty(0) if db is None else db


@layer_norm_bwd.register_fake
def _(dy, x, weight, mean, rstd, has_bias, bias_dtype):
    dw = torch.empty_like(weight) if weight is not None else x.new_empty(0)
    db = x.new_empty(x.shape[-1], dtype=bias_dtype) if has_bias else x.new_empty(0)
    return torch.empty_like(x), dw, db


def _setup_context(ctx, inputs, output):
    x, weight, bias, _eps = inputs
    ctx.save_for_backward(x, weight, output[1], output[2])
    ctx.has_bias = bias is not None
    ctx.bias_dtype = bias.dtype if bias is not None else x.dtype


def _backward(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = layer_norm_bwd(dy.contiguous(), x, weight, mean, rstd, ctx.has_bias, ctx.bias_dtype)
    return dx, (dw if weight is not None else None), (db if ctx.has_bias else None), None


layer_norm_fwd.register_autograd(_backward, setup_context=_setup_context)


def check_inputs(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> None:
    """Raises with what to change."""
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"triton_layer_norm supports float32/float16/bfloat16 inputs, got {x.dtype}")
    if not x.shape or x.shape[-1] == 0:
        raise ValueError(f"triton_layer_norm needs a non-empty last dimension, got shape {tuple(x.shape)}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        if p.shape != x.shape[-1:]:
            raise ValueError(
                f"{name} must have shape ({x.shape[-1]},) to match x's last dimension, got {tuple(p.shape)}"
            )
        if p.device != x.device:
            raise ValueError(f"{name} is on {p.device} but x is on {x.device}; move them to one device")
        if p.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} must be float32/float16/bfloat16, got {p.dtype}")
