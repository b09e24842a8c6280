"""`triton_layer_norm(x, weight, bias, eps)`: the Triton LayerNorm with autograd, eager and compiled.

Importing this module imports triton and registers `normlab::layer_norm_fwd` / `normlab::layer_norm_bwd`
(torch.library.custom_op + register_fake + register_autograd), so `torch.compile` keeps them in one
graph. Outside torch.compile, `triton_layer_norm` skips the custom-op dispatch (tens of µs of Python a
call) and goes through `_LayerNormFunction`, a plain torch.autograd.Function. Both call the same launch
functions, `ln_run._forward_into` and `ln_run._backward_into`, so both run the same kernels with the same
launches and give the same bits. Launch heuristics (tier, rows per program, warps, persistent grid size)
live in `ln_launch.py`, computed once per shape; the kernels and their maths in `ln_triton.py` (forward)
and `ln_bwd_triton.py` (backward). On CPU tensors the kernels run only under TRITON_INTERPRET=1 (set
before this module is imported).
"""

# No `from __future__ import annotations`: older torch (2.11 on the GPU machine) infers custom-op
# schemas more reliably from real annotation objects.
import torch

# Re-exported: the fused cells, kernels.aot and the tests import these from here.
from kernels.ln_launch import (  # noqa: F401
    SM,
    SUM_BLOCK_C,
    SUM_BLOCK_P,
    TIERS,
    CellLaunch,
    Launch,
    SumLaunch,
    _bwd_launch,
    _fwd_launch,
    _sum_launch,
    bwd_config,
    cell_launch,
    co_resident,
    fwd_config,
    persistent_programs,
    resident_grid,
    sum_config,
    warps_for,
)
from kernels.ln_run import _GRIDS, LAUNCHERS, _backward_into, _forward_into, _sum_into, column_sum  # noqa: F401

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


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
