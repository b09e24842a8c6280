"""oneDNN's float32 products: the same numbers as the definition (to float32 rounding), deterministic."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

from workers.engine import onednn

needs_onednn = pytest.mark.skipif(not onednn.supported(), reason="this torch has no oneDNN")


@pytest.fixture(autouse=True)
def _onednn_on():
    """The path on for these tests, whatever this CPU's default ('auto' keeps it off on Intel CPUs)."""
    with onednn.forced(True):
        yield


def _data(seed=0, dtype=torch.float32):
    """A product with enough rows for the oneDNN path (256)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 64, 128, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(160, 128, generator=g, dtype=dtype, requires_grad=True)
    b = torch.randn(160, generator=g, dtype=dtype, requires_grad=True)
    assert x.numel() // x.shape[-1] >= onednn.MIN_ROWS
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
    assert out.grad_fn.name().endswith("_LinearBackward")  # the oneDNN path, not F.linear
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-4)
    for got, want in ((x.grad, x64.grad), (w.grad, w64.grad), (b.grad, b64.grad)):
        assert got.shape == want.shape and got.is_contiguous()
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-3)


@needs_onednn
def test_products_are_bitwise_the_same_for_one_and_two_threads():
    x, w, _ = _data(3)
    h, d = x.detach().reshape(-1, 128), torch.randn(256, 160)
    before = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            packed = onednn.pack(w, h.shape[0])
            results.append(
                [
                    onednn.linear(h, packed),
                    onednn.linear_add(d, h, onednn.pack(w.t(), 256)),
                    onednn.weight_grad(d, h),
                ]
            )
    finally:
        torch.set_num_threads(before)
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


def test_other_dtypes_small_products_and_switch_off_use_torch():
    x, w, b = _data(dtype=torch.float64)
    assert not onednn.applies(x, w)
    assert torch.equal(onednn.fast_linear(x, w, b), F.linear(x, w, b))  # float64: torch's own product
    small = torch.randn(32, 64), torch.randn(256, 64)  # a batch of 32 rows: a oneDNN call would cost more
    assert torch.equal(onednn.fast_linear(*small), F.linear(*small))
    # NORMLAB_ONEDNN=false reaches the engine as Settings(onednn=False); train() configures the path so
    env = {**os.environ, "NORMLAB_ONEDNN": "false"}
    code = (
        "from normlab.settings import Settings; from workers.engine import onednn; "
        "onednn.configure(Settings().onednn); print(onednn.available())"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


@needs_onednn
def test_second_derivatives_through_fast_linear_are_torch_s():
    # the probes' Fisher- and Hessian-vector products differentiate the backward itself; oneDNN's ops
    # have no derivatives (autograd warned "silently incorrect"), so that backward uses torch's products
    x, w, b = _data(5)
    g = torch.Generator().manual_seed(6)
    v = [torch.randn(t.shape, generator=g) for t in (x, w, b)]

    def hvp(f):
        out = f(x, w, b).tanh().square().sum()
        grads = torch.autograd.grad(out, (x, w, b), create_graph=True)
        return torch.autograd.grad(sum((gi * vi).sum() for gi, vi in zip(grads, v, strict=True)), (x, w, b))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = hvp(onednn.fast_linear)
    for a, want in zip(got, hvp(F.linear), strict=True):
        torch.testing.assert_close(a, want, rtol=1e-4, atol=1e-4)


def test_the_settings_passed_to_train_switch_the_path():
    from normlab.settings import Settings
    from normlab.spec import RunSpec
    from workers.engine import train

    spec = RunSpec(task="digits", steps=2, hidden_size=8, eval_every=2)
    train(spec, settings=Settings(onednn=False))
    assert not onednn.available()
    train(spec, settings=Settings(onednn=True))
    assert onednn.available() == onednn.supported()
    train(spec, settings=Settings())  # 'auto': oneDNN only where MKL is the slower of the two
    assert onednn.available() == (onednn.supported() and onednn.preferred())


def test_auto_takes_onednn_off_intel_cpus_only(monkeypatch):
    vendor = onednn.cpu_vendor()
    assert vendor == "" or vendor.isprintable() and len(vendor) < 64
    for name, preferred in (("GenuineIntel", False), ("AuthenticAMD", True), ("", True)):
        monkeypatch.setattr(onednn, "cpu_vendor", lambda name=name: name)
        assert onednn.preferred() is preferred
        assert onednn.configure("auto") is (preferred and onednn.supported())
        assert onednn.configure(True) is onednn.supported() and onednn.configure(False) is False
    with pytest.raises(ValueError, match="true, false or 'auto'"):
        onednn.configure("yes")
