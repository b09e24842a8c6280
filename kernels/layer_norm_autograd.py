"""`triton_layer_norm` and the measured `dispatched_layer_norm`: the eager paths the engine calls.

Launches and the custom ops are in layer_norm_op.py, the kernels in layer_norm_triton.py. Eagerly, with
grad, one `autograd.Function` runs each direction on its side ('triton', or one of the mixed sides
'triton/torch', 'torch/triton': forward/backward; the statistics are interchangeable, fp32 mean and rstd
per row). Without grad no autograd.Function is built: the forward kernel's plan runs alone. Under
torch.compile the custom op (triton_layer_norm) or `F.layer_norm` (dispatched: inductor fuses its own).

The measured dispatch asks a `Calibrator` (dispatch.py) once per (GPU, dtype, grad or not, shape class):
without grad the forward alone, Triton's plan vs `F.layer_norm`; with grad, forward + backward through
autograd exactly as a training step runs them, every side vs `F.layer_norm` with its C++ backward. A
shape class's first call pays the calibration (≈ 4 candidates × 61 timed calls, plus Triton's compile on
a cold cache: about 0.1–2 s); later calls pay a dict lookup.
"""

from __future__ import annotations

import importlib
import inspect

import torch
import torch.nn.functional as F

from kernels import layer_norm_op as op
from kernels.dispatch import Calibrator, fingerprint, shape_class

TRAIN_SIDES = ("torch", "triton", "triton/torch", "torch/triton")  # forward side / backward side


def _aten_forward(x, weight, bias, eps):
    y, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], weight, bias, eps)
    return y, mean.reshape(-1), rstd.reshape(-1)


class _LayerNorm(torch.autograd.Function):
    """Eager autograd (no custom-op dispatch on the hot path): forward and backward each on `side`'s side
    ('triton' for both, or 'forward/backward')."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, side):
        fwd, _, bwd = side.partition("/")
        y, mean, rstd = (op.triton_forward if fwd == "triton" else _aten_forward)(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.triton_bwd = (bwd or fwd) == "triton"
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        dy = dy.contiguous()
        mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[1],
                bias is not None and ctx.needs_input_grad[2]]  # fmt: skip
        if ctx.triton_bwd:
            bias_dtype = bias.dtype if bias is not None else x.dtype
            dx, dw, db = op.triton_backward(dy, x, weight, mean, rstd, mask[2], bias_dtype)
        else:
            lead = (*x.shape[:-1], 1)
            dx, dw, db = torch.ops.aten.native_layer_norm_backward(
                dy, x, [x.shape[-1]], mean.view(lead), rstd.view(lead), weight, bias, mask
            )
        return dx, dw if mask[1] else None, db if mask[2] else None, None, None


def _needs_grad(x, weight, bias) -> bool:
    if not torch.is_grad_enabled():
        return False
    return x.requires_grad or any(p is not None and p.requires_grad for p in (weight, bias))


def triton_layer_norm(
    x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """LayerNorm over the last dimension by the Triton kernels; differentiable: the custom op (one graph
    node) under torch.compile, a plain autograd.Function eagerly, the forward plan alone without grad.
    CPU tensors need TRITON_INTERPRET=1 set before triton is imported."""
    op.check_inputs(x, weight, bias)
    if torch.compiler.is_compiling():
        return op.layer_norm_fwd(x, weight, bias, float(eps))[0]
    if not _needs_grad(x, weight, bias):
        return op.triton_forward(x, weight, bias, float(eps))[0]
    return _LayerNorm.apply(x, weight, bias, float(eps), "triton")


# ---- measured dispatch: the faster of these kernels and torch's, per shape class ----


def source_fingerprint() -> str:
    """A hash of the LayerNorm kernels' and launches' sources and the Triton/torch versions: the key under
    which a Calibrator stores its choices (a changed kernel or toolchain measures again)."""
    import triton

    sources = [inspect.getsource(importlib.import_module(f"kernels.{m}"))
               for m in ("layer_norm_triton", "layer_norm_op", "launch")]  # fmt: skip
    return fingerprint(*sources, triton.__version__, torch.__version__)


def make_calibrator(cache_dir=None, timer=None, margin=None) -> Calibrator:
    """A Calibrator for the LayerNorm dispatch, its cache file keyed by `source_fingerprint()`; built by the
    caller's edge (a worker, a benchmark) and passed to `dispatched_layer_norm`."""
    kwargs = {} if margin is None else {"margin": margin}
    return Calibrator(timer=timer, cache_dir=cache_dir, fingerprint=source_fingerprint(), **kwargs)


_DEVICE_NAMES: dict[int, str] = {}  # device index -> model name: a constant of the machine, looked up once


def _device_name(x: torch.Tensor) -> str:
    index = x.device.index or 0
    name = _DEVICE_NAMES.get(index)
    if name is None:
        name = _DEVICE_NAMES[index] = torch.cuda.get_device_name(x.device)
    return name


def _candidates(x, weight, bias, eps, grad: bool) -> dict:
    """No-argument calls of each side on detached copies of the inputs: the forward alone without grad,
    forward + backward through autograd (as a training step runs it) with grad. 'torch' is the baseline."""
    N = x.shape[-1]
    if not grad:

        def plain(fn):
            def run():
                with torch.no_grad():
                    fn()

            return run

        return {"torch": plain(lambda: F.layer_norm(x, (N,), weight, bias, eps)),
                "triton": plain(lambda: op.triton_forward(x, weight, bias, eps))}  # fmt: skip
    leaves = [None if t is None else t.detach().requires_grad_(t.requires_grad) for t in (x, weight, bias)]
    inputs = [t for t in leaves if t is not None and t.requires_grad]
    dy = torch.randn_like(x)

    def step(fn):
        def run():
            with torch.enable_grad():
                torch.autograd.grad(fn(*leaves), inputs, dy)

        return run

    sides = {"torch": step(lambda a, w, b: F.layer_norm(a, (N,), w, b, eps))}
    for side in TRAIN_SIDES[1:]:
        sides[side] = step(lambda a, w, b, side=side: _LayerNorm.apply(a, w, b, eps, side))
    return sides


def _choice(x, weight, bias, eps, grad: bool, calibrator: Calibrator) -> str:
    """The side for this input: measured once per shape class, never inside a graph capture."""
    N = x.shape[-1]
    M = x.numel() // N
    memo = (x.device.index, x.dtype, grad, M, N)
    side = calibrator.fast.get(memo)
    if side is not None:
        return side
    key = f"{str(x.dtype).removeprefix('torch.')}/{'train' if grad else 'infer'}/{shape_class(M, N)}"
    device = _device_name(x)
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        return calibrator.known(device, key) or "torch"
    op.check_inputs(x, weight, bias)  # every candidate must be able to run
    side = calibrator.fast[memo] = calibrator.choose(device, key, _candidates(x, weight, bias, eps, grad))
    return side


_PROCESS: list[Calibrator] = []  # the in-memory calibrator of callers that pass none (tests, notebooks)


def process_calibrator() -> Calibrator:
    """The calibrator used when a caller passes none: in memory only, built on first use (no file)."""
    if not _PROCESS:
        _PROCESS.append(make_calibrator())
    return _PROCESS[0]


def dispatched_layer_norm(x, weight, bias, eps: float = 1e-5, calibrator: Calibrator | None = None):
    """LayerNorm on a CUDA tensor by whichever side `calibrator` measured faster for its shape class (with
    grad: forward + backward; without: the forward); under torch.compile, `F.layer_norm`."""
    N = x.shape[-1]
    if torch.compiler.is_compiling() or x.numel() == 0:
        return F.layer_norm(x, (N,), weight, bias, eps)
    grad = _needs_grad(x, weight, bias)
    side = _choice(x, weight, bias, float(eps), grad, calibrator or process_calibrator())
    if side == "torch":
        return F.layer_norm(x, (N,), weight, bias, eps)  # no wrapper's host time
    if not grad:
        return op.triton_forward(x, weight, bias, float(eps))[0]
    return _LayerNorm.apply(x, weight, bias, float(eps), side)
