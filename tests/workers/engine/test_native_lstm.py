"""The LSTM's C step (float32): eq. 20 / 29 / 17 to float32 rounding against a float64 reference, a
retained second backward, saturation and NaN, and the fallback without a compiler. (The same bits for
any thread count: test_recurrent.py's thread-choice test, which runs float32 through this path.)"""

from __future__ import annotations

import pytest
import torch

from workers.engine import native
from workers.engine.lstm_seq import lstm_sequence
from workers.engine.options import DEFAULT, EngineOptions

needs_native = pytest.mark.skipif(
    native.library(DEFAULT) is None, reason=f"no C step: {native.status(DEFAULT)}"
)
COMBOS = [(True, True), (True, False), (False, True), (False, False)]


def _args(ln_h: bool, ln_c: bool, T=7, B=5, H=12, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)

    def mk(*shape, scale=1.0, shift=0.0):
        t = torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift
        return t.to(dtype).requires_grad_()

    G = 4 * H
    return [
        mk(T, B, G),
        mk(G, H, scale=0.3),
        mk(G, shift=1.0) if ln_h else None,
        mk(G) if ln_h else None,
        mk(H, shift=1.0) if ln_c else None,
        mk(H) if ln_c else None,
        mk(B, H),
        mk(B, H),
    ]


def _run(args, d_out):
    out = lstm_sequence(*args)
    leaves = [a for a in args if a is not None]
    grads = torch.autograd.grad((out * d_out).sum(), leaves)
    return out.detach(), grads


@needs_native
@pytest.mark.parametrize("layout", ["broadcast", "transposed"])
def test_c_step_takes_an_output_gradient_of_any_strides(layout):
    # out.sum()'s gradient is a broadcast view, no copy is made of it; it must give the same numbers as the
    # same gradient laid out densely
    T, B, H = 6, 8, 256
    args = _args(True, True, T=T, B=B, H=H, seed=4)
    if layout == "broadcast":
        odd = torch.full((1, 1, 1), 0.7).expand(T, B, H)
    else:
        odd = torch.randn(H, B, T, generator=torch.Generator().manual_seed(5)).permute(2, 1, 0)
    assert not odd.is_contiguous()
    out = lstm_sequence(*args)
    leaves = [a for a in args if a is not None]
    got = torch.autograd.grad(out, leaves, odd)
    out = lstm_sequence(*args)
    want = torch.autograd.grad(out, leaves, odd.contiguous())
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


@needs_native
@pytest.mark.parametrize("ln_h,ln_c", COMBOS)
def test_c_step_matches_float64_definition(ln_h, ln_c):
    args32 = _args(ln_h, ln_c)
    assert native.applies(DEFAULT, *[a for a in args32 if a is not None])
    args64 = [None if a is None else a.detach().double().requires_grad_() for a in args32]
    d = torch.randn(7, 5, 12, generator=torch.Generator().manual_seed(9))
    out32, g32 = _run(args32, d)
    out64, g64 = _run(args64, d.double())  # float64 takes the torch path, itself pinned by gradcheck
    torch.testing.assert_close(out32.double(), out64, rtol=0, atol=2e-6)
    for a, b in zip(g32, g64, strict=True):
        assert a.dtype == torch.float32 and a.shape == b.shape
        assert ((a.double() - b).norm() / b.norm()).item() < 5e-6


@needs_native
def test_c_step_survives_a_retained_second_backward():
    args = _args(True, True, seed=3)
    out = lstm_sequence(*args).square().sum()
    leaves = [a for a in args if a is not None]
    first = torch.autograd.grad(out, leaves, retain_graph=True)
    second = torch.autograd.grad(out, leaves)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


@needs_native
def test_c_step_saturates_cleanly_and_passes_nan_on():
    args = _args(True, True, seed=4)
    with torch.no_grad():
        xx = args[0].detach() * 1e4  # gates far into saturation: exp over/underflows, σ must not
        out = lstm_sequence(xx, *args[1:])
        assert torch.isfinite(out).all() and out.abs().max() <= 1
        xx[3, 1, 0] = float("nan")  # a diverged run must stay visibly diverged
        out = lstm_sequence(xx, *args[1:])
    assert torch.isnan(out[3:, 1]).all() and torch.isfinite(out[:3]).all()


def test_without_a_compiler_the_torch_path_runs(tmp_path):
    options = EngineOptions(cc="/bin/false", cache_dir=tmp_path)
    xx, w = torch.randn(3, 2, 8), torch.randn(8, 2)
    out = lstm_sequence(xx, w, None, None, None, None, torch.zeros(2, 2), torch.zeros(2, 2), options=options)
    assert native.library(options) is None and tuple(out.shape) == (3, 2, 2)
    assert "failed" in native.status(options)


@needs_native
def test_c_step_off_runs_torch_ops_to_the_same_numbers():
    # EngineOptions(c_step=False) is the A/B switch: the torch path in the same node, equal to rounding
    off = EngineOptions(c_step=False)
    assert native.library(off) is None and native.status(off) == native.OFF
    args = _args(True, True, seed=6)
    d = torch.randn(7, 5, 12, generator=torch.Generator().manual_seed(7))
    leaves = [a for a in args if a is not None]
    on_out = lstm_sequence(*args)
    on = torch.autograd.grad((on_out * d).sum(), leaves)
    off_out = lstm_sequence(*args, options=off)
    torch_path = torch.autograd.grad((off_out * d).sum(), leaves)
    torch.testing.assert_close(on_out, off_out, atol=2e-6, rtol=0)
    for a, b in zip(on, torch_path, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-4)
