"""The private torch APIs product code calls, pinned: their schemas and their numbers.

torch promises nothing about `torch.ops.aten.*`, `torch.native_*` and `torch._foreach_*`; the project
uses them where the public API would cost a copy or a Python loop per step:

- `torch.native_layer_norm` / `torch.ops.aten.native_layer_norm` and
  `torch.ops.aten.native_layer_norm_backward`: LayerNorm's forward with its per-row mean and 1/σ, and the
  backward from them (the LN-LSTM recurrence `workers/engine/lstm_seq.py`, the per-case probes
  `workers/probes/fused.py` and `tangent.py`, the measured dispatch's torch side
  `kernels/layer_norm_autograd.py`);
- `torch._foreach_norm` (gradient norm on a GPU `workers/engine/train.py`, `workers/probes/start.py`),
  `torch._foreach_add_` (`workers/probes/fisher.py`), `torch._foreach_copy_` (`workers/probes/eigen.py`,
  the CUDA-graph inputs `kernels/graph_entry.py`).

The tests run at the torch that `scripts/test` installs (its `torch==` line; pyproject.toml allows
`torch>=2.4,<3`, a GPU machine keeps its own build). A torch upgrade that changes a schema, a returned
shape or a number fails here, naming the op, before it reaches a training run. A new private torch API in
product code fails `test_product_code_uses_only_the_pinned_private_torch_apis` until it is pinned here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("normlab", "backend", "frontend", "workers", "kernels", "benchmarks")


def _tested_torch() -> str:
    match = re.search(r"torch==([0-9][0-9.]*)", (ROOT / "scripts" / "test").read_text())
    assert match, "scripts/test names no torch== version"
    return match.group(1)


TESTED = _tested_torch()
WHERE = f"(tested at torch=={TESTED}, running {torch.__version__})"

# op -> {overload: schema} exactly as torch prints it: the signatures product code calls.
SCHEMAS = {
    "native_layer_norm": {
        "default": "aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, "
        "Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
    },
    "native_layer_norm_backward": {
        "default": "aten::native_layer_norm_backward(Tensor grad_out, Tensor input, "
        "SymInt[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, "
        "bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
    },
    "_foreach_norm": {
        "Scalar": "aten::_foreach_norm.Scalar(Tensor[] self, Scalar ord=2, ScalarType? dtype=None) "
        "-> Tensor[]",
    },
    "_foreach_add_": {
        "List": "aten::_foreach_add_.List(Tensor(a!)[] self, Tensor[] other, *, Scalar alpha=1) -> ()",
    },
    "_foreach_copy_": {
        "default": "aten::_foreach_copy_(Tensor(a!)[] self, Tensor[] src, bool non_blocking=False) -> ()",
    },
}
# The dotted names product code may use: each maps to an op pinned above.
PINNED = {
    "torch.native_layer_norm": "native_layer_norm",
    "torch.ops.aten.native_layer_norm": "native_layer_norm",
    "torch.ops.aten.native_layer_norm_backward": "native_layer_norm_backward",
    "torch._foreach_norm": "_foreach_norm",
    "torch._foreach_add_": "_foreach_add_",
    "torch._foreach_copy_": "_foreach_copy_",
}

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")),
]


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _private(name: str) -> bool:
    """torch.* names outside the public API: torch.ops.*, torch.native_*, any _segment (not dunder)."""
    parts = name.split(".")
    if parts[0] != "torch" or len(parts) < 2:
        return False
    if parts[1] == "ops" or parts[1].startswith("native_"):
        return True
    return any(p.startswith("_") and not p.startswith("__") for p in parts[1:])


def _private_uses() -> dict[str, list[str]]:
    """Every private torch name in product code -> where (file:line); `from torch._x import` too. Of a
    chain `torch.ops.aten.x` (walked also as `torch.ops.aten`, `torch.ops`) only the whole name counts."""
    by_place: dict[str, set[str]] = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                names: list[str | None] = []
                if isinstance(node, ast.Attribute):
                    names.append(_dotted(node))
                elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torch"):
                    names += [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names += [a.name for a in node.names]
                place = (
                    f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}:{getattr(node, 'col_offset', 0)}"
                )
                by_place.setdefault(place, set()).update(n for n in names if n and _private(n))
    out: dict[str, list[str]] = {}
    for place, names in by_place.items():
        for name in names:
            if not any(other.startswith(name + ".") for other in names):
                out.setdefault(name, []).append(place)
    return out


def test_product_code_uses_only_the_pinned_private_torch_apis():
    uses = _private_uses()
    unpinned = {name: places for name, places in uses.items() if name not in PINNED}
    assert not unpinned, f"private torch APIs with no pin test here: {unpinned}"
    # Each pinned name is still used somewhere: a pin nobody needs goes with its last caller.
    assert set(PINNED) == set(uses), f"pinned but unused: {set(PINNED) - set(uses)}"


@pytest.mark.parametrize(("op", "overloads"), SCHEMAS.items())
def test_the_private_ops_keep_their_schemas(op, overloads):
    packet = getattr(torch.ops.aten, op, None)
    assert packet is not None, f"torch.ops.aten.{op} is gone {WHERE}"
    for overload, schema in overloads.items():
        assert overload in packet.overloads(), f"aten::{op}.{overload} is gone {WHERE}"
        assert str(getattr(packet, overload)._schema) == schema, f"aten::{op}.{overload} changed {WHERE}"
    for name, target in PINNED.items():
        if target == op and name.startswith("torch.") and not name.startswith("torch.ops."):
            assert callable(getattr(torch, name.removeprefix("torch."), None)), f"{name} is gone {WHERE}"


# ---- LayerNorm in float64, from its definition (eq. 15 and its derivative) ----


def _ln_definition(x, weight, bias, eps):
    """y = (x − μ)/√(σ² + eps) ⊙ w + b over the last dimension, population variance; also μ and
    1/√(σ² + eps)."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    rstd = 1 / torch.sqrt(var + eps)
    y = (x - mean) * rstd
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y, mean, rstd


def _inputs(shape, device, dtype, affine, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 3 + 1.5).to(device, dtype)
    n = shape[-1]
    w = (torch.randn(n, generator=g, dtype=torch.float64) + 1).to(device, dtype) if affine else None
    b = torch.randn(n, generator=g, dtype=torch.float64).to(device, dtype) if affine else None
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(device, dtype)
    return x, w, b, dy


def _f64(t):
    return None if t is None else t.double().cpu()


TOL = {torch.float64: {"rtol": 1e-12, "atol": 1e-12}, torch.float32: {"rtol": 1e-5, "atol": 1e-5}}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(7, 33), (3, 5, 64)])
@pytest.mark.parametrize("name", ["torch.native_layer_norm", "torch.ops.aten.native_layer_norm"])
def test_native_layer_norm_is_the_definition(name, shape, affine, dtype, device):
    op = torch.native_layer_norm if name == "torch.native_layer_norm" else torch.ops.aten.native_layer_norm
    eps = 1e-5
    x, w, b, _ = _inputs(shape, device, dtype, affine)
    y, mean, rstd = op(x, (shape[-1],), w, b, eps)
    y_ref, mean_ref, rstd_ref = _ln_definition(_f64(x), _f64(w), _f64(b), eps)
    # callers keep the statistics as (*leading, 1) rows, in the input's dtype on the CPU
    assert y.shape == x.shape and mean.shape == rstd.shape == (*shape[:-1], 1), f"{name}: shapes {WHERE}"
    assert y.dtype == x.dtype and y.device == x.device, f"{name}: dtype/device {WHERE}"
    for got, ref in ((y, y_ref), (mean, mean_ref), (rstd, rstd_ref)):
        torch.testing.assert_close(_f64(got), ref, **TOL[dtype], msg=lambda m: f"{name} {WHERE}: {m}")


def _backward_reference(x, w, b, dy, eps):
    """(dx, dw, db) of Σ dy ⊙ y, by autograd through the plain-op definition in float64."""
    x = x.clone().requires_grad_()
    w = None if w is None else w.clone().requires_grad_()
    b = None if b is None else b.clone().requires_grad_()
    y, _, _ = _ln_definition(x, w, b, eps)
    wanted = [t for t in (x, w, b) if t is not None]
    grads = iter(torch.autograd.grad((y * dy).sum(), wanted))
    return [next(grads) if t is not None else None for t in (x, w, b)]


def _backward_formula(x, w, dy, eps):
    """dx from the closed form: rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂)), g = dy ⊙ w."""
    _, mean, rstd = _ln_definition(x, None, None, eps)
    xhat = (x - mean) * rstd
    g = dy if w is None else dy * w
    return rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(7, 33), (3, 5, 64)])
def test_native_layer_norm_backward_is_the_derivative(shape, affine, dtype, device):
    eps = 1e-5
    x, w, b, dy = _inputs(shape, device, dtype, affine, seed=1)
    _, mean, rstd = torch.native_layer_norm(x, (shape[-1],), w, b, eps)
    # the statistics as the dispatch passes them: flat per row, viewed back to (*leading, 1)
    mean, rstd = mean.reshape(-1).view(*shape[:-1], 1), rstd.reshape(-1).view(*shape[:-1], 1)
    mask = [True, affine, affine]
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(dy, x, (shape[-1],), mean, rstd, w, b, mask)
    ref = _backward_reference(_f64(x), _f64(w), _f64(b), _f64(dy), eps)
    torch.testing.assert_close(
        ref[0], _backward_formula(_f64(x), _f64(w), _f64(dy), eps), rtol=1e-12, atol=1e-12
    )
    for got, want, what in zip((dx, dw, db), ref, ("dx", "dw", "db"), strict=True):
        if want is None:
            assert got is None, f"native_layer_norm_backward: {what} not masked out {WHERE}"
            continue
        assert got.shape == want.shape and got.dtype == dtype, f"native_layer_norm_backward {what} {WHERE}"
        torch.testing.assert_close(
            _f64(got), want, **TOL[dtype], msg=lambda m, what=what: f"backward {what} {WHERE}: {m}"
        )


@pytest.mark.parametrize("device", DEVICES)
def test_native_layer_norm_backward_honours_its_output_mask(device):
    """The probes ask for dx only with a gain and no bias ([True, False, False]): the others are None."""
    eps = 1e-5
    x, w, _, dy = _inputs((6, 20), device, torch.float64, affine=True, seed=2)
    _, mean, rstd = torch.native_layer_norm(x, (20,), None, None, eps)
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(
        dy, x, (20,), mean, rstd, w, None, [True, False, False]
    )
    assert dw is None and db is None, f"masked outputs returned {WHERE}"
    torch.testing.assert_close(
        _f64(dx), _backward_formula(_f64(x), _f64(w), _f64(dy), eps), rtol=1e-12, atol=1e-12
    )


# ---- the foreach ops: one kernel per list, same numbers as the per-tensor definition ----


def _tensors(device, dtype, seed=3):
    g = torch.Generator().manual_seed(seed)
    shapes = [(5, 7), (13,), (2, 3, 4), ()]
    return [torch.randn(s, generator=g, dtype=torch.float64).to(device, dtype) for s in shapes]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_foreach_norm_is_each_tensors_two_norm(device, dtype):
    ts = _tensors(device, dtype)
    norms = torch._foreach_norm(ts)
    assert len(norms) == len(ts), f"_foreach_norm: one norm per tensor {WHERE}"
    for t, n in zip(ts, norms, strict=True):
        assert n.shape == () and n.dtype == dtype and n.device == t.device, f"_foreach_norm {WHERE}"
        want = torch.sqrt((_f64(t) ** 2).sum())
        torch.testing.assert_close(_f64(n), want, **TOL[dtype], msg=lambda m: f"_foreach_norm {WHERE}: {m}")


@pytest.mark.parametrize("device", DEVICES)
def test_foreach_add_adds_alpha_times_the_other_list_in_place(device):
    # integers and a power-of-two alpha: every result is exact, fused multiply-add or not
    ts = [
        torch.arange(6.0, dtype=torch.float64, device=device).view(2, 3),
        torch.full((4,), 3.0, device=device),
    ]
    vs = [torch.ones(2, 3, dtype=torch.float64, device=device) * 5, torch.arange(4.0, device=device)]
    before = [t.clone() for t in ts]
    pointers = [t.data_ptr() for t in ts]
    torch._foreach_add_(ts, vs, alpha=-0.25)
    assert [t.data_ptr() for t in ts] == pointers, f"_foreach_add_ is in place {WHERE}"
    for t, b, v in zip(ts, before, vs, strict=True):
        assert torch.equal(t.cpu(), b.cpu() - v.cpu() / 4), f"_foreach_add_ {WHERE}"


@pytest.mark.parametrize("device", DEVICES)
def test_foreach_copy_copies_into_the_same_storage(device):
    """CUDA graphs and the probes' preallocated rows rely on the destination keeping its storage."""
    dst = [torch.zeros_like(t) for t in _tensors(device, torch.float32)]
    src = _tensors(device, torch.float32, seed=4)
    pointers = [t.data_ptr() for t in dst]
    torch._foreach_copy_(dst, src)
    assert [t.data_ptr() for t in dst] == pointers, f"_foreach_copy_ kept no storage {WHERE}"
    assert all(torch.equal(d, s) for d, s in zip(dst, src, strict=True)), f"_foreach_copy_ {WHERE}"
    assert all(d is not s for d, s in zip(dst, src, strict=True))
