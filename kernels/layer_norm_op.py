"""`triton_layer_norm` and the measured `dispatched_layer_norm`: launches, autograd, dispatch.

The kernels and their maths are in layer_norm_triton.py. Launch heuristics live here and only here: the
forward takes ROWS short rows per program or walks a long row in chunks; the backward is persistent, its
grid P computed per call from (M, N, device). One custom op pair (`normlab::layer_norm_fwd` / `_bwd`)
carries autograd and keeps the kernels in a torch.compile graph. On CUDA the engine's `kernels.layer_norm`
reaches `dispatched_layer_norm`, which runs the side measured faster per shape class (dispatch.py).
"""

# No `from __future__ import annotations`: older torch infers custom-op schemas from real annotations.
import functools
from typing import NamedTuple

import torch
import triton

from kernels import layer_norm_triton as K
from kernels.dispatch import CALIBRATOR, shape_class

MAX_RESIDENT = 8192  # widest row (next power of two) held in registers; longer rows are walked in chunks
CHUNK = 4096  # columns per chunk (forward walk) and per segment (backward) of a long row
SMALL_ROW_ELEMS = 4096  # a forward program over short rows takes about this many elements
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# ---- launch heuristics: the only place that picks blocks, warps and grids ----


def warps_for(elems: int) -> int:
    """Warps for a program holding `elems` fp32 values: about 8–16 per thread."""
    if elems <= 1024:
        return 4 if elems > 256 else 1 if elems <= 64 else 2
    return 8 if elems <= 4096 else 16 if elems <= 16384 else 32


@functools.lru_cache(maxsize=8)
def persistent_programs(device: torch.device) -> int:
    """Programs of a persistent grid on this device: two per SM; few on the interpreter (CPU tests)."""
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return 4


class Launch(NamedTuple):
    """One kernel's launch: its block, rows per program (forward) or row range (backward), grid, warps."""

    BLOCK_N: int
    ROWS: int
    grid: tuple
    num_warps: int
    long: bool


def fwd_launch(M: int, N: int) -> Launch:
    block = triton.next_power_of_2(N)
    if block > MAX_RESIDENT:
        return Launch(CHUNK, 1, (M,), warps_for(CHUNK), True)
    rows = max(1, min(SMALL_ROW_ELEMS // block, 16, triton.next_power_of_2(M)))
    return Launch(block, rows, (triton.cdiv(M, rows),), warps_for(block * rows), False)


def bwd_launch(M: int, N: int, device: torch.device) -> Launch:
    """P programs (P·segments about one wave) each over a contiguous range of ROWS rows; long rows in
    segments of CHUNK columns (grid (P, segments))."""
    block = triton.next_power_of_2(N)
    # rows not a multiple of 16 load element by element: past 4096 their resident backward spills
    long = block > MAX_RESIDENT or (block > CHUNK and N % 16 != 0)
    seg = CHUNK if long else block
    segments = triton.cdiv(N, seg)
    P = max(1, min(M, persistent_programs(device) // segments if long else persistent_programs(device)))
    rows = triton.cdiv(M, P)
    P = triton.cdiv(M, rows)  # no program without rows
    # x, ∂y, γ and the two partial rows stay resident: about four times the forward's registers.
    return Launch(seg, rows, (P, segments), min(16, warps_for(4 * seg)), long)


def forward_into(x2, weight, bias, eps: float, y, mean, rstd) -> None:
    """Fills y (row-major, M·N elements, any shape) and fp32 (M,) mean / rstd from the (M, N) rows x2
    (unit column stride); weight and bias have a unit stride or are None."""
    M, N = x2.shape
    if M == 0:
        return
    cfg = fwd_launch(M, N)
    K._ln_fwd[cfg.grid](
        x2, y, x2 if weight is None else weight, x2 if bias is None else bias, mean, rstd,
        x2.stride(0), M, N, eps,
        BLOCK_N=cfg.BLOCK_N, ROWS=cfg.ROWS, LONG=cfg.long,
        HAS_W=weight is not None, HAS_B=bias is not None, num_warps=cfg.num_warps,
    )  # fmt: skip


def backward_into(dy2, x2, weight, mean, rstd, dx, has_bias: bool, bias_dtype) -> tuple:
    """Fills dx (row-major, M·N elements) and returns (∂γ or None, ∂β or None)."""
    M, N = x2.shape
    dev = x2.device
    has_w = weight is not None
    if M == 0:
        zeros = functools.partial(torch.zeros, N, device=dev)
        return (zeros(dtype=weight.dtype) if has_w else None, zeros(dtype=bias_dtype) if has_bias else None)
    cfg = bwd_launch(M, N, dev)
    P = cfg.grid[0]
    w = weight if has_w else x2
    rowsums = torch.empty((M, 2), dtype=torch.float32, device=dev) if cfg.long else mean
    if cfg.long:
        K._ln_bwd_rowsums[(M,)](
            dy2, x2, w, mean, rstd, rowsums, dy2.stride(0), x2.stride(0), N,
            BLOCK_N=CHUNK, HAS_W=has_w, num_warps=warps_for(2 * CHUNK),
        )  # fmt: skip
    part = torch.empty((int(has_w) + int(has_bias), P, N), dtype=torch.float32, device=dev)
    dw_part = part[0] if has_w else mean
    db_part = part[-1] if has_bias else mean
    K._ln_bwd[cfg.grid](
        dy2, x2, w, mean, rstd, rowsums, dx, dw_part, db_part, dy2.stride(0), x2.stride(0), M, N, cfg.ROWS,
        BLOCK_N=cfg.BLOCK_N, SEGMENTED=cfg.long, HAS_W=has_w, HAS_B=has_bias, num_warps=cfg.num_warps,
    )  # fmt: skip
    dw = column_sum(part[0], weight.dtype) if has_w else None
    db = column_sum(part[-1], bias_dtype) if has_bias else None
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


def _triton_forward(x, weight, bias, eps):
    x2 = _rows(x)
    M = x2.shape[0]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    mean = torch.empty(M, dtype=torch.float32, device=x.device)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    forward_into(x2, _unit(weight), _unit(bias), eps, y, mean, rstd)
    return y, mean, rstd


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
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw, db = backward_into(_rows(dy), _rows(x), _unit(weight), mean, rstd, dx, has_bias, bias_dtype)
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


def triton_layer_norm(
    x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """LayerNorm over the last dimension by the Triton kernels; differentiable: the custom op (one graph
    node) under torch.compile, a plain autograd.Function eagerly. CPU tensors need TRITON_INTERPRET=1 set
    before triton is imported."""
    check_inputs(x, weight, bias)
    if torch.compiler.is_compiling():
        return layer_norm_fwd(x, weight, bias, float(eps))[0]
    return _LayerNorm.apply(x, weight, bias, float(eps), False)


# ---- measured dispatch: the faster of these kernels and torch's, per shape class (kernels/dispatch.py) ----


def _aten_forward(x, weight, bias, eps):
    y, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], weight, bias, eps)
    return y, mean.reshape(-1), rstd.reshape(-1)


_DEVICE_NAMES: dict[int, str] = {}
_CHOSEN: dict[tuple, str] = {}  # (device index, dtype, direction, M, N) -> side: the per-call fast path


def _device_name(x: torch.Tensor) -> str:
    index = x.device.index or 0
    name = _DEVICE_NAMES.get(index)
    if name is None:
        name = _DEVICE_NAMES[index] = torch.cuda.get_device_name(x.device)
    return name


def _choice(x: torch.Tensor, direction: str, ours, theirs) -> str:
    """'triton' or 'torch' for this input: measured once per shape class, never inside a graph capture."""
    N = x.shape[-1]
    M = x.numel() // N
    memo = (x.device.index, x.dtype, direction, M, N)
    side = _CHOSEN.get(memo)
    if side is not None:
        return side
    key = f"{str(x.dtype).removeprefix('torch.')}/{direction}/{shape_class(M, N)}"
    device = _device_name(x)
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        return CALIBRATOR.choices.get(device, {}).get(key, "torch")
    side = _CHOSEN[memo] = CALIBRATOR.choose(device, key, ours, theirs)
    return side


class _LayerNorm(torch.autograd.Function):
    """Eager autograd (no custom-op dispatch on the hot path). With `measured`, forward and backward each
    take the side measured faster; their statistics are interchangeable (fp32 mean and rstd per row), so
    the two directions choose independently. Without it both are the Triton kernels."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, measured):
        args = (x, weight, bias, eps)
        side = (
            _choice(x, "fwd", lambda: _triton_forward(*args), lambda: _aten_forward(*args))
            if measured
            else "triton"
        )
        y, mean, rstd = (_triton_forward if side == "triton" else _aten_forward)(*args)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.measured = measured
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        dy = dy.contiguous()
        mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[1],
                bias is not None and ctx.needs_input_grad[2]]  # fmt: skip
        lead = (*x.shape[:-1], 1)

        def theirs():
            return torch.ops.aten.native_layer_norm_backward(
                dy, x, [x.shape[-1]], mean.view(lead), rstd.view(lead), weight, bias, mask
            )

        def ours():
            dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            bias_dtype = bias.dtype if bias is not None else x.dtype
            dw, db = backward_into(_rows(dy), _rows(x), _unit(weight), mean, rstd, dx, mask[2], bias_dtype)
            return dx, dw, db

        side = _choice(x, "bwd", ours, theirs) if ctx.measured else "triton"
        dx, dw, db = (ours if side == "triton" else theirs)()
        return dx, dw if mask[1] else None, db if mask[2] else None, None, None


def dispatched_layer_norm(x, weight, bias, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm on a CUDA tensor by whichever of Triton and torch was measured faster for its shape class;
    under torch.compile, torch's (inductor generates and fuses its own kernel there)."""
    N = x.shape[-1]
    if torch.compiler.is_compiling():
        return torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)
    M = x.numel() // N if N else 0
    memo = (x.device.index, x.dtype)
    if _CHOSEN.get((*memo, "fwd", M, N)) == _CHOSEN.get((*memo, "bwd", M, N)) == "torch":
        return torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)  # no wrapper's host time
    check_inputs(x, weight, bias)
    return _LayerNorm.apply(x, weight, bias, float(eps), True)
