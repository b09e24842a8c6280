"""`triton_layer_norm(x, weight, bias, eps)`: the Triton LayerNorm with autograd, eager and compiled.

Importing this module imports triton and registers `normlab::layer_norm_fwd` / `normlab::layer_norm_bwd`
(torch.library.custom_op + register_fake + register_autograd), so `torch.compile` keeps them in one
graph. Outside torch.compile, `triton_layer_norm` skips the custom-op dispatch (tens of µs of Python a
call) and goes through `_LayerNormFunction`, a plain torch.autograd.Function. Both call the same launch
functions, `_forward_into` and `_backward_into`, so both run the same kernels with the same launches and
give the same bits. Launch heuristics (tier, rows per program, warps, persistent grid size) live here,
computed once per shape (`_fwd_launch` / `_bwd_launch` / `_sum_launch` are cached); the kernels and
their maths live in `ln_triton.py`. On CPU tensors the kernels run only under TRITON_INTERPRET=1 (set
before this module is imported).
"""

# No `from __future__ import annotations`: older torch (2.11 on the GPU machine) infers custom-op
# schemas more reliably from real annotation objects.
import functools
from typing import NamedTuple

import torch
import triton

from kernels import ln_triton as K
from kernels.launcher import Launcher

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TIERS = {"auto": 0, "resident": 1, "looped": 2}
SUM_BLOCK_P = 32  # partial rows per step of `_column_sum`
SUM_BLOCK_C = 128  # widest column strip of one `_column_sum` program (narrower when that adds programs)
# Every LayerNorm kernel launches through a Launcher: its compiled kernel kept per specialization key and
# its C launcher called directly (kernels/launcher.py), not Triton's JIT binder on every call.
# (the count is each kernel's leading tensor arguments)
LAUNCHERS = {
    name: Launcher(getattr(K, name), tensors, name)
    for name, tensors in (
        ("_ln_fwd_resident", 6),
        ("_ln_fwd_shifted", 6),
        ("_ln_fwd_looped", 6),
        ("_ln_bwd_resident", 8),
        ("_ln_bwd_shifted", 8),
        ("_ln_bwd_looped", 8),
        ("_column_sum", 3),
    )
}


@functools.lru_cache(maxsize=8)
def persistent_programs(device: torch.device) -> int:
    """How many programs a persistent backward grid launches on this device (a few per SM)."""
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the interpreter runs programs one by one: few programs keep CPU tests fast


class SM(NamedTuple):
    """What one streaming multiprocessor offers resident blocks (torch's device properties)."""

    count: int
    regs: int = 65536
    threads: int = 2048
    shared: int = 228 * 1024
    max_blocks: int = 32


@functools.lru_cache(maxsize=8)
def sm_of(device: torch.device) -> SM:
    p = torch.cuda.get_device_properties(device)
    return SM(
        p.multi_processor_count,
        getattr(p, "regs_per_multiprocessor", 65536),
        getattr(p, "max_threads_per_multi_processor", 2048),
        getattr(p, "shared_memory_per_multiprocessor", 228 * 1024),
    )


def co_resident(n_regs: int, num_warps: int, shared: int, sm: SM) -> int:
    """Blocks of a kernel that fit on one SM at once: by registers (allocated per warp in units of 256),
    threads, shared memory (1 KiB reserved per block) and the per-SM block limit; at least 1."""
    per_warp = -(-max(n_regs, 1) * 32 // 256) * 256
    by_regs = sm.regs // per_warp // num_warps
    by_threads = sm.threads // (32 * num_warps)
    by_shared = sm.shared // (shared + 1024) if shared else sm.max_blocks
    return max(1, min(by_regs, by_threads, by_shared, sm.max_blocks))


def warps_for(elems: int) -> int:
    """Warps for a program holding `elems` fp32 values: about 8–16 per thread (16-byte vectors).

    Checked with ptxas -v (python -m kernels.aot) under triton 3.6 and 3.9: fewer warps at 8192 left
    ~155 registers a thread (one 8-warp program per SM); more warps at 16384 spill.
    """
    if elems <= 1024:
        return 4 if elems > 256 else 1 if elems <= 64 else 2
    if elems <= 4096:
        return 8
    if elems <= 16384:
        return 16
    return 32


class Launch(NamedTuple):
    """One LayerNorm kernel launch; `grid` is the program count (the backward's P, its partial rows)."""

    kernel: str  # 'resident' | 'looped'
    BLOCK_N: int
    ROWS: int
    num_warps: int
    grid: int
    STAGES: int = 1  # backward only: software-pipelining depth of its loops (see ln_triton.STAGES)


class SumLaunch(NamedTuple):
    """One `_column_sum` launch over `slabs` (P, N) partial slabs: grid (cdiv(N, BLOCK_C), slabs)."""

    BLOCK_P: int
    BLOCK_C: int
    num_warps: int
    grid: tuple


@functools.lru_cache(maxsize=512)
def _fwd_launch(
    M: int, N: int, tier: int = 0, max_resident: int = K.MAX_RESIDENT, shifted: bool = True
) -> Launch:
    block = triton.next_power_of_2(N)
    if tier == TIERS["looped"] or (tier == 0 and block > max_resident):
        chunk = min(K.LOOP_BLOCK, max(16, block // 4))
        return Launch("looped", chunk, 1, warps_for(chunk), M)
    if shifted and tier == 0 and N % 16 and N >= K.MIN_SHIFTED:
        # N not a multiple of 16: one row per program, read as head + 16-byte-aligned body + tail
        # (_ln_fwd_shifted; the launcher falls back to the resident kernel, one row per program, when the
        # rows do not share X's and Y's 16-byte alignment)
        return Launch("shifted", block, 1, warps_for(block), M)
    rows = max(1, min(K.SMALL_ROW_ELEMS // block, 16, triton.next_power_of_2(M)))
    return Launch("resident", block, rows, warps_for(block * rows), triton.cdiv(M, rows))


@functools.lru_cache(maxsize=512)
def _bwd_launch(M: int, N: int, device: torch.device, tier: int = 0) -> Launch:
    cfg = _fwd_launch(M, N, tier, K.MAX_RESIDENT_BWD, shifted=False)
    warps = cfg.num_warps
    if cfg.kernel == "resident":
        # x, dy, γ and two partial rows stay resident: about four times the forward's register need.
        warps = warps_for(4 * cfg.BLOCK_N * cfg.ROWS)
    if tier == 0 and cfg.kernel == "resident" and N % 16 and N >= K.MIN_SHIFTED:
        # N not a multiple of 16: _ln_bwd_shifted (16-byte loads of the rows' aligned bodies). Its grid is
        # a multiple of 8 (or M itself), so all rows of a program share their offset from a 16-byte
        # boundary; at most 16 warps (ptxas -v: 32 warps spilled up to 108 bytes at 4099, 16 do not).
        programs = persistent_programs(device)
        return Launch(
            "shifted",
            cfg.BLOCK_N,
            1,
            min(16, warps_for(4 * cfg.BLOCK_N)),
            min(M, max(8, programs // 8 * 8)),
            K.STAGES.value,
        )
    units = M if cfg.kernel == "looped" else triton.cdiv(M, cfg.ROWS)
    # grid ≤ units: every program owns at least one row (the looped tier's first-write rule needs it).
    # Pipelined loops where N (so the row stride, usually) is a multiple of 16: 16-byte loads, no spills
    # (ptxas -v, sm_90); otherwise (scalar loads) pipelining spilled 80-100 bytes, so those stay plain.
    return cfg._replace(
        num_warps=warps,
        grid=max(1, min(persistent_programs(device), units)),
        STAGES=K.STAGES.value if N % 16 == 0 else 1,
    )


@functools.lru_cache(maxsize=512)
def _sum_launch(P: int, N: int, slabs: int, device: torch.device) -> SumLaunch:
    """Column strips narrow enough (≥ 32 columns: a 128-byte line per partial row) that even a wide-N
    sum spreads over ≥ one program per persistent slot. 4096×8192 on an H200 (P = 264, dγ and dβ): one
    launch of 256 strips × 2 slabs = 512 programs of 32 columns, where two launches of 8 programs each
    walked all 264 partial rows of 1024 columns (77 µs each)."""
    block_c = min(SUM_BLOCK_C, max(16, triton.next_power_of_2(N)))
    target = persistent_programs(device)
    while block_c > 32 and triton.cdiv(N, block_c) * slabs < target:
        block_c //= 2
    block_p = min(SUM_BLOCK_P, triton.next_power_of_2(P))
    return SumLaunch(block_p, block_c, 4, (triton.cdiv(N, block_c), slabs))


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


def fwd_config(M: int, N: int, tier: int = 0, max_resident: int = K.MAX_RESIDENT) -> dict:
    """The forward launch: {'kernel': 'resident' / 'shifted' / 'looped', 'BLOCK_N', 'ROWS', 'num_warps',
    'grid'}."""
    return _fwd_launch(M, N, tier, max_resident)._asdict()


def bwd_config(M: int, N: int, device: torch.device, tier: int = 0) -> dict:
    """The backward launch; 'grid' is the persistent program count P (also the partial buffer's rows)."""
    return _bwd_launch(M, N, device, tier)._asdict()


def sum_config(P: int, N: int, slabs: int = 1, device: torch.device = torch.device("cpu")) -> dict:
    """The `_column_sum` launch: {'BLOCK_P', 'BLOCK_C', 'num_warps', 'grid'} (for kernels.aot)."""
    return _sum_launch(P, N, slabs, device)._asdict()


def _check(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> None:
    """Raises with what to change; a handful of attribute reads when the inputs are fine."""
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"triton_layer_norm supports float32/float16/bfloat16 inputs, got {x.dtype}")
    shape = x.shape
    if not shape or shape[-1] == 0:
        raise ValueError(f"triton_layer_norm needs a non-empty last dimension, got shape {tuple(shape)}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        if p.shape != shape[-1:]:
            raise ValueError(
                f"{name} must have shape ({shape[-1]},) to match x's last dimension, got {tuple(p.shape)}"
            )
        if p.device != x.device:
            raise ValueError(f"{name} is on {p.device} but x is on {x.device}; move them to one device")
        if p.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} must be float32/float16/bfloat16, got {p.dtype}")


def _rows(t: torch.Tensor) -> torch.Tensor:
    """(M, N) view with a contiguous last dimension (copies only when it has to)."""
    if t.dim() == 2 and t.stride(1) == 1:
        return t  # what reshape would return, without its dispatch
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _dense_like(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised row-major tensor of t's shape (row stride N): the kernels' y and dx."""
    if t.dtype == dtype and t.is_contiguous():
        return torch.empty_like(t)  # the cheapest allocation call (~1 µs less than torch.empty(shape))
    return torch.empty(t.shape, dtype=dtype, device=t.device)


# ---- launch functions: the only code that launches the LayerNorm kernels (custom ops and eager) ----


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
    and bias have a unit stride (`_check`)."""
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
                BLOCK_N=cfg.BLOCK_N,
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


_BWD_KERNEL = {"resident": "_ln_bwd_resident", "shifted": "_ln_bwd_shifted", "looped": "_ln_bwd_looped"}


def _bwd_meta(cfg: Launch, x2: torch.Tensor, has_w: bool, has_b: bool) -> dict:
    """The constexprs and options of one backward launch."""
    meta = {
        "BLOCK_N": cfg.BLOCK_N,
        "HAS_W": has_w,
        "HAS_B": has_b,
        "STAGES": cfg.STAGES,
        "num_warps": cfg.num_warps,
    }
    if cfg.kernel == "shifted":
        meta["VEC"] = 16 // x2.element_size()
    elif cfg.kernel == "resident":
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


def resident_grid(cfg: Launch, M: int, blocks_per_sm: int, sms: int) -> int:
    """The backward's P for `blocks_per_sm` co-resident programs on `sms` SMs: no more programs than units of
    work (rows, or row groups of the resident tier: each program owns at least one, which the looped tier's
    first-write rule needs); the shifted tier's P a multiple of 8 (its programs' rows share their 16-byte
    alignment) unless that exceeds M."""
    P = blocks_per_sm * sms
    if cfg.kernel == "shifted":
        P = max(8, P // 8 * 8)
    units = triton.cdiv(M, cfg.ROWS) if cfg.kernel == "resident" else M
    return max(1, min(P, units))


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
    strides = (dy2.stride(0), x2.stride(0), N, M, N)
    # The grid is sized on a compile with dummy partial pointers (mean): registers do not depend on them.
    P = _persistent_grid(
        _BWD_KERNEL[cfg.kernel],
        cfg,
        M,
        (dy2, x2, w, mean, rstd, dx, mean, mean, *strides),
        (cfg, has_w, has_bias),
        _bwd_meta(cfg, x2, has_w, has_bias),
        x2,
    )
    slabs = int(has_w) + int(has_bias)
    part = torch.empty((slabs, P, N), dtype=torch.float32, device=dev) if slabs else mean
    # Slab 0 is dγ's when there is a weight, else dβ's; a dummy (mean) pointer for an absent one.
    dw_part = part if has_w else mean
    db_part = (part[1] if has_w else part) if has_bias else mean
    LAUNCHERS[_BWD_KERNEL[cfg.kernel]](
        (P,),
        (dy2, x2, w, mean, rstd, dx, dw_part, db_part, *strides),
        (cfg, has_w, has_bias),
        **_bwd_meta(cfg, x2, has_w, has_bias),
    )
    if not slabs:
        return None, None
    dw = torch.empty(N, dtype=weight.dtype, device=dev) if has_w else None
    db = torch.empty(N, dtype=bias_dtype, device=dev) if has_bias else None
    first = dw if has_w else db
    _sum_into(part, slabs, P, N, first, db if has_w and has_bias else first)
    return dw, db


# ---- the custom ops (torch.compile keeps these in its graph) ----


@torch.library.custom_op("normlab::layer_norm_fwd", mutates_args=())
def layer_norm_fwd(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, tier: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd): y like x; mean and rstd fp32 of shape (M,) with M = x.numel() // N."""
    x2 = _rows(x)
    M = x2.shape[0]
    weight, bias = _unit_stride(weight), _unit_stride(bias)
    y = _dense_like(x, x.dtype)
    # Two allocations, not one (2, M) buffer as the eager path has: custom-op outputs must not alias.
    mean = torch.empty(M, dtype=torch.float32, device=x.device)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    _forward_into(x2, weight, bias, eps, tier, y, mean, rstd)
    return y, mean, rstd


@layer_norm_fwd.register_fake
def _(x, weight, bias, eps, tier):
    M = x.numel() // x.shape[-1]
    return (torch.empty_like(x), x.new_empty(M, dtype=torch.float32), x.new_empty(M, dtype=torch.float32))


@torch.library.custom_op("normlab::layer_norm_bwd", mutates_args=())
def layer_norm_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    has_bias: bool,
    bias_dtype: torch.dtype,
    tier: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias); dweight / dbias are empty tensors when weight / bias are absent."""
    x2, dy2 = _rows(x), _rows(dy)
    dx = _dense_like(x, x.dtype)
    dw, db = _backward_into(dy2, x2, _unit_stride(weight), mean, rstd, dx, has_bias, bias_dtype, tier)
    # Distinct empty tensors for absent parameters: custom-op outputs must not alias.
    return dx, x.new_empty(0) if dw is None else dw, x.new_empty(0) if db is None else db


@layer_norm_bwd.register_fake
def _(dy, x, weight, mean, rstd, has_bias, bias_dtype, tier):
    N = x.shape[-1]
    dw = torch.empty_like(weight) if weight is not None else x.new_empty(0)
    db = x.new_empty(N, dtype=bias_dtype) if has_bias else x.new_empty(0)
    return torch.empty_like(x), dw, db


def _setup_context(ctx, inputs, output):
    x, weight, bias, eps, tier = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.has_bias = bias is not None
    ctx.bias_dtype = bias.dtype if bias is not None else x.dtype
    ctx.tier = tier


def _backward(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = layer_norm_bwd(dy, x, weight, mean, rstd, ctx.has_bias, ctx.bias_dtype, ctx.tier)
    return dx, (dw if weight is not None else None), (db if ctx.has_bias else None), None, None


layer_norm_fwd.register_autograd(_backward, setup_context=_setup_context)


# ---- the eager path: no custom-op dispatch ----


class _LayerNormFunction(torch.autograd.Function):
    """Eager autograd for `triton_layer_norm`: the same launch functions as the custom ops."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, tier):
        x2 = _rows(x)
        y, stats = _forward_eager(x, x2, weight, bias, eps, tier)
        ctx.save_for_backward(x2, weight)
        ctx.stats = stats  # an intermediate (not an input or output): a plain attribute is enough
        ctx.tier = tier
        ctx.x_dtype = x.dtype
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x2, weight = ctx.saved_tensors
        mean, rstd = ctx.stats
        dx = _dense_like(dy, ctx.x_dtype)  # dy has x's shape
        # dβ only when asked for (it costs the kernel a partial row); dγ comes with γ itself (HAS_W).
        has_bias = ctx.bias_dtype is not None and ctx.needs_input_grad[2]
        dw, db = _backward_into(_rows(dy), x2, weight, mean, rstd, dx, has_bias, ctx.bias_dtype, ctx.tier)
        return dx, dw, db, None, None


def _forward_eager(x, x2, weight, bias, eps, tier):
    """(y, (stats, rstd)): stats is one fp32 (2, M) allocation whose row 0 holds the means and row 1 (the
    view rstd) the reciprocal deviations; the kernels take stats' pointer as the means'."""
    y = _dense_like(x, x.dtype)
    stats = torch.empty((2, x2.shape[0]), dtype=torch.float32, device=x.device)
    rstd = stats[1]
    _forward_into(x2, weight, bias, eps, tier, y, stats, rstd)  # stats' pointer is row 0's: mean
    return y, (stats, rstd)


def _unit_stride(p: torch.Tensor | None) -> torch.Tensor | None:
    """γ or β as the kernels read it (unit stride); a copy only for a strided view, never a no-op call."""
    return p if p is None or p.stride(0) == 1 else p.contiguous()


def triton_layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    tier: str = "auto",
) -> torch.Tensor:
    """LayerNorm over the last dimension by the Triton kernels (differentiable; `tier` for tests/bench).

    Under torch.compile: the custom op `normlab::layer_norm_fwd` (one graph node, autograd registered).
    Eagerly: `_LayerNormFunction`, or no autograd at all when nothing needs a gradient.
    """
    _check(x, weight, bias)
    t = TIERS.get(tier)
    if t is None:
        raise ValueError(f"unknown tier {tier!r}; use one of {sorted(TIERS)}")
    weight, bias = _unit_stride(weight), _unit_stride(bias)
    if torch.compiler.is_compiling():
        return layer_norm_fwd(x, weight, bias, float(eps), t)[0]
    if torch.is_grad_enabled() and (
        x.requires_grad
        or (weight is not None and weight.requires_grad)
        or (bias is not None and bias.requires_grad)
    ):
        return _LayerNormFunction.apply(x, weight, bias, float(eps), t)
    return _forward_eager(x, _rows(x), weight, bias, float(eps), t)[0]
