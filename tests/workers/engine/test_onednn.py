"""oneDNN's float32 products: the same numbers as the definition (to float32 rounding), deterministic."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from workers.engine import onednn

needs_onednn = pytest.mark.skipif(not onednn.available(), reason="this torch has no oneDNN")


def _data(seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 7, 24, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(40, 24, generator=g, dtype=dtype, requires_grad=True)
    b = torch.randn(40, generator=g, dtype=dtype, requires_grad=True)
    return x, w, b


@needs_onednn
def test_fast_linear_matches_float64_definition_with_gradients():
    x, w, b = _data()
    out = onednn.fast_linear(x, w, b)
    d = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    (out * d).sum().backward()
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref = x64 @ w64.T + b64
    (ref * d.double()).sum().backward()
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    for got, want in ((x.grad, x64.grad), (w.grad, w64.grad), (b.grad, b64.grad)):
        assert got.shape == want.shape and got.is_contiguous()
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_products_are_bitwise_the_same_for_one_and_two_threads():
    x, w, _ = _data(3)
    h, d = x.detach().reshape(-1, 24), torch.randn(35, 40)
    before = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            packed = onednn.pack(w, h.shape[0])
            results.append([onednn.linear(h, packed), onednn.linear_add(d, h[:, :24], onednn.pack(w.t(), 35)),
                            onednn.weight_grad(d, h)])
    finally:
        torch.set_num_threads(before)
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


def test_other_dtypes_and_switch_off_use_torch():
    x, w, b = _data(dtype=torch.float64)
    assert not onednn.applies(x, w)
    assert torch.equal(onednn.fast_linear(x, w, b), F.linear(x, w, b))  # float64: torch's own product
    env = {**os.environ, "NORMLAB_ONEDNN": "0"}
    code = "from workers.engine import onednn; print(onednn.available())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
