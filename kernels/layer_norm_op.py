"""`triton_layer_norm(x, weight, bias, eps)`: the Triton LayerNorm as torch custom ops with autograd.

Importing this module imports triton and registers `normlab::layer_norm_fwd` / `normlab::layer_norm_bwd`
(torch.library.custom_op + register_fake + register_autograd), so `torch.compile` keeps them in one
graph. Launch heuristics (tier, rows per program, warps, persistent grid size) live here; the kernels and
their maths live in `ln_triton.py`. On CPU tensors the kernels run only under TRITON_INTERPRET=1 (set
before this module is imported).
"""

# No `from __future__ import annotations`: older torch (2.11 on the GPU machine) infers custom-op
# schemas more reliably from real annotation objects.
import functools

import torch
import triton

from kernels import ln_triton as K

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TIERS = {"auto": 0, "resident": 1, "looped": 2}


@functools.lru_cache(maxsize=8)
def persistent_programs(device: torch.device) -> int:
    """How many programs a persistent backward grid launches on this device (a few per SM)."""
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the interpreter runs programs one by one: few programs keep CPU tests fast


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


def fwd_config(M: int, N: int, tier: int = 0, max_resident: int = K.MAX_RESIDENT) -> dict:
    """The forward launch: {'kernel': 'resident'|'looped', 'BLOCK_N', 'ROWS', 'num_warps', 'grid'}."""
    block = triton.next_power_of_2(N)
    if tier == TIERS["looped"] or (tier == 0 and block > max_resident):
        chunk = min(K.LOOP_BLOCK, max(16, block // 4))
        return {"kernel": "looped", "BLOCK_N": chunk, "ROWS": 1, "num_warps": warps_for(chunk), "grid": M}
    rows = max(1, min(K.SMALL_ROW_ELEMS // block, 16, triton.next_power_of_2(M)))
    return {"kernel": "resident", "BLOCK_N": block, "ROWS": rows, "num_warps": warps_for(block * rows),
            "grid": triton.cdiv(M, rows)}


def bwd_config(M: int, N: int, device: torch.device, tier: int = 0) -> dict:
    """The backward launch; 'grid' is the persistent program count P (also the partial buffer's rows)."""
    cfg = fwd_config(M, N, tier, K.MAX_RESIDENT_BWD)
    if cfg["kernel"] == "resident":
        # x, dy, γ and two partial rows stay resident: about four times the forward's register need.
        cfg["num_warps"] = warps_for(4 * cfg["BLOCK_N"] * cfg["ROWS"])
    units = M if cfg["kernel"] == "looped" else triton.cdiv(M, cfg["ROWS"])
    cfg["grid"] = max(1, min(persistent_programs(device), units))
    return cfg


def _check(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> None:
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"triton_layer_norm supports float32/float16/bfloat16 inputs, got {x.dtype}")
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"triton_layer_norm needs a non-empty last dimension, got shape {tuple(x.shape)}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        if p.shape != (x.shape[-1],):
            raise ValueError(f"{name} must have shape ({x.shape[-1]},) to match x's last dimension, "
                             f"got {tuple(p.shape)}")
        if p.device != x.device:
            raise ValueError(f"{name} is on {p.device} but x is on {x.device}; move them to one device")
        if p.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} must be float32/float16/bfloat16, got {p.dtype}")


def _rows(t: torch.Tensor) -> torch.Tensor:
    """(M, N) view with a contiguous last dimension (copies only when it has to)."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


@torch.library.custom_op("normlab::layer_norm_fwd", mutates_args=())
def layer_norm_fwd(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   eps: float, tier: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd): y like x; mean and rstd fp32 of shape (M,) with M = x.numel() // N."""
    x2 = _rows(x)
    M, N = x2.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    mean = torch.empty(M, dtype=torch.float32, device=x.device)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    if M == 0:
        return y.view(x.shape), mean, rstd
    cfg = fwd_config(M, N, tier)
    w = weight.contiguous() if weight is not None else x2  # a dummy pointer when absent
    b = bias.contiguous() if bias is not None else x2
    common = dict(BLOCK_N=cfg["BLOCK_N"], HAS_W=weight is not None, HAS_B=bias is not None,
                  num_warps=cfg["num_warps"])
    if cfg["kernel"] == "resident":
        K._ln_fwd_resident[(cfg["grid"],)](x2, y, w, b, mean, rstd, x2.stride(0), y.stride(0), M, N, eps,
                                           ROWS=cfg["ROWS"], **common)
    else:
        K._ln_fwd_looped[(cfg["grid"],)](x2, y, w, b, mean, rstd, x2.stride(0), y.stride(0), M, N, eps,
                                         **common)
    return y.view(x.shape), mean, rstd


@layer_norm_fwd.register_fake
def _(x, weight, bias, eps, tier):
    M = x.numel() // x.shape[-1]
    return (torch.empty_like(x), x.new_empty(M, dtype=torch.float32), x.new_empty(M, dtype=torch.float32))


def column_sum(part: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Σ over the rows of a fp32 (P, N) partial buffer, in a fixed order, cast to `dtype`."""
    P, N = part.shape
    out = torch.empty(N, dtype=dtype, device=part.device)
    block_c = min(1024, triton.next_power_of_2(N))
    K._column_sum[(triton.cdiv(N, block_c),)](part, out, P, N, BLOCK_P=8, BLOCK_C=block_c, num_warps=4)
    return out


@torch.library.custom_op("normlab::layer_norm_bwd", mutates_args=())
def layer_norm_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
                   rstd: torch.Tensor, has_bias: bool, bias_dtype: torch.dtype,
                   tier: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias); dweight / dbias are empty tensors when weight / bias are absent."""
    x2, dy2 = _rows(x), _rows(dy)
    M, N = x2.shape
    dx = torch.empty((M, N), dtype=x.dtype, device=x.device)
    has_w = weight is not None
    cfg = bwd_config(M, N, x.device, tier)
    P = cfg["grid"]
    looped = cfg["kernel"] == "looped"
    alloc = torch.zeros if looped else torch.empty  # looped programs read-modify-write their rows
    dw_part = alloc((P, N), dtype=torch.float32, device=x.device) if has_w else mean
    db_part = alloc((P, N), dtype=torch.float32, device=x.device) if has_bias else mean
    w = weight.contiguous() if has_w else x2
    if M > 0:
        common = dict(BLOCK_N=cfg["BLOCK_N"], HAS_W=has_w, HAS_B=has_bias, num_warps=cfg["num_warps"])
        args = (dy2, x2, w, mean, rstd, dx, dw_part, db_part, dy2.stride(0), x2.stride(0), dx.stride(0), M, N)
        if looped:
            K._ln_bwd_looped[(P,)](*args, **common)
        else:
            K._ln_bwd_resident[(P,)](*args, ROWS=cfg["ROWS"], **common)
    dw = x.new_empty(0)  # two distinct tensors: custom-op outputs must not alias
    db = x.new_empty(0)
    if has_w:
        dw = column_sum(dw_part, weight.dtype) if M > 0 else torch.zeros_like(weight)
    if has_bias:
        db = column_sum(db_part, bias_dtype) if M > 0 else torch.zeros(N, dtype=bias_dtype, device=x.device)
    return dx.view(x.shape), dw, db


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


def triton_layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                      eps: float = 1e-5, *, tier: str = "auto") -> torch.Tensor:
    """LayerNorm over the last dimension by the Triton kernels (differentiable; `tier` for tests/bench)."""
    _check(x, weight, bias)
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; use one of {sorted(TIERS)}")
    y, _, _ = layer_norm_fwd(x, weight, bias, float(eps), TIERS[tier])
    return y
