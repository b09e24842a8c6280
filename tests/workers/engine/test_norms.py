"""Normalizers against their definitions, in float64 (eq. 2, eq. 3/15, §4/§5.1, RMSNorm)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from workers.engine.norms import (
    BatchNorm,
    GroupNorm,
    LayerNorm,
    NormLinear,
    PlainLinear,
    RMSNorm,
    WeightNormLinear,
    make_linear,
)

D = torch.float64


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def _randomize(module: nn.Module, gen: torch.Generator) -> nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return module


def test_layernorm_equals_eq3_by_hand(gen):
    a = torch.randn(5, 7, generator=gen, dtype=D) * 3 + 1
    ln = _randomize(LayerNorm(7).double(), gen)
    H = a.shape[1]
    mu = a.sum(1, keepdim=True) / H
    sigma = (((a - mu) ** 2).sum(1, keepdim=True) / H).sqrt()  # population variance: divide by H
    expected = ln.gain / (sigma**2 + ln.eps).sqrt() * (a - mu) + ln.bias
    assert_close(ln(a), expected, rtol=1e-12, atol=1e-12)
    # and not the unbiased (H − 1) variant: the difference is far above the tolerance
    unbiased = ln.gain / (a.var(1, keepdim=True) + ln.eps).sqrt() * (a - mu) + ln.bias
    assert (ln(a) - unbiased).abs().max() > 1e-3


def test_layernorm_defaults_and_gain_init():
    ln = LayerNorm(4)
    assert torch.equal(ln.gain, torch.ones(4)) and torch.equal(ln.bias, torch.zeros(4))
    ln = LayerNorm(4, gain_init=0.1)
    assert torch.allclose(ln.gain, torch.full((4,), 0.1))


def test_layernorm_calls_kernel_seam(monkeypatch):
    import kernels

    calls = []
    real = kernels.layer_norm
    monkeypatch.setattr(kernels, "layer_norm", lambda *a, **k: calls.append(1) or real(*a, **k))
    LayerNorm(3)(torch.randn(2, 3))
    assert calls


def test_layernorm_channels_normalizes_whole_map(gen):
    a = torch.randn(3, 4, 5, 5, generator=gen, dtype=D)
    ln = _randomize(LayerNorm(4, channels=True).double(), gen)
    flat = a.flatten(1)
    mu = flat.mean(1).view(-1, 1, 1, 1)
    var = flat.var(1, unbiased=False).view(-1, 1, 1, 1)
    expected = (a - mu) / (var + ln.eps).sqrt() * ln.gain.view(1, -1, 1, 1) + ln.bias.view(1, -1, 1, 1)
    assert_close(ln(a), expected)


def test_rmsnorm_by_hand(gen):
    a = torch.randn(6, 9, generator=gen, dtype=D) + 2
    rms = _randomize(RMSNorm(9).double(), gen)
    expected = a / (a.pow(2).mean(1, keepdim=True) + rms.eps).sqrt() * rms.gain + rms.bias
    assert_close(rms(a), expected)


def test_groupnorm_runs_on_odd_channel_counts(gen):
    gn = GroupNorm(6, groups=8).double()  # 8 does not divide 6: falls back to a divisor
    y = gn(torch.randn(2, 6, 3, 3, generator=gen, dtype=D))
    assert gn.groups == 2 and y.shape == (2, 6, 3, 3)


def test_batchnorm_training_uses_batch_statistics_eq2(gen):
    a = torch.randn(16, 5, generator=gen, dtype=D) * 2 + 3
    bn = _randomize(BatchNorm(5).double(), gen)
    mu = a.mean(0)
    var = a.var(0, unbiased=False)
    assert_close(bn(a), bn.gain * (a - mu) / (var + bn.eps).sqrt() + bn.bias)
    # running statistics moved towards the batch statistics (momentum 0.1, unbiased running variance)
    assert_close(bn.running_mean[0], 0.1 * mu)
    assert_close(bn.running_var[0], 0.9 + 0.1 * a.var(0, unbiased=True))


def test_batchnorm_unbiased_variance_divides_by_b_minus_1_as_in_section_6_6(gen):
    a = torch.randn(4, 5, generator=gen, dtype=D) * 2 + 3
    bn = _randomize(BatchNorm(5).double(), gen)
    bn.unbiased = True
    var = ((a - a.mean(0)) ** 2).sum(0) / (4 - 1)
    assert_close(bn(a), bn.gain * (a - a.mean(0)) / (var + bn.eps).sqrt() + bn.bias)
    assert_close(bn.running_var[0], 0.9 + 0.1 * var)  # the running variance is unbiased either way
    maps = torch.randn(3, 5, 2, 2, generator=gen, dtype=D)  # conv maps: statistics over batch and positions
    flat = maps.transpose(0, 1).reshape(5, -1)
    var = flat.var(1, unbiased=True).view(1, 5, 1, 1)
    expected = (maps - flat.mean(1).view(1, 5, 1, 1)) / (var + bn.eps).sqrt()
    assert_close(bn(maps), bn.gain.view(1, 5, 1, 1) * expected + bn.bias.view(1, 5, 1, 1))


def test_batchnorm_eval_uses_running_statistics(gen):
    bn = BatchNorm(5).double()
    for _ in range(30):
        bn(torch.randn(32, 5, generator=gen, dtype=D) * 2 + 3)
    bn.eval()
    one = torch.randn(1, 5, generator=gen, dtype=D)  # batch size 1 is fine at evaluation
    expected = (one - bn.running_mean[0]) / (bn.running_var[0] + bn.eps).sqrt()
    assert_close(bn(one), expected)
    assert (bn.running_mean[0] - 3).abs().max() < 0.5


def test_batchnorm_refuses_batch_size_one_in_training():
    with pytest.raises(ValueError, match="batch size ≥ 2.*layer"):
        BatchNorm(3)(torch.randn(1, 3))


def test_recurrent_batchnorm_keeps_per_step_statistics(gen):
    bn = BatchNorm(4, per_step=True, max_steps=2).double()
    for _ in range(60):
        for t in range(3):  # 3 > max_steps: the buffers grow
            bn(torch.randn(64, 4, generator=gen, dtype=D) + 10.0 * t, step=t)
    assert int(bn.trained_steps) == 3 and bn.running_mean.shape == (3, 4)
    for t in range(3):  # each step's running mean tracks its own distribution (mean 10·t)
        assert (bn.running_mean[t] - 10.0 * t).abs().max() < 0.5
    # and the statistics differ between steps
    assert (bn.running_mean[2] - bn.running_mean[0]).abs().min() > 15


def test_recurrent_batchnorm_beyond_trained_length_reuses_last_step(gen):
    bn = BatchNorm(4, per_step=True, max_steps=3).double()
    for t in range(3):
        bn(torch.randn(8, 4, generator=gen, dtype=D) + t, step=t)
    bn.eval()
    x = torch.randn(2, 4, generator=gen, dtype=D)
    outs = [bn(x, step=t) for t in range(7)]  # 4 steps past the trained length: no crash
    for t in range(3, 7):
        assert_close(outs[t], outs[2])  # documented policy: the last trained step's statistics
    assert not torch.allclose(outs[0], outs[2])
    report = bn.beyond_report()
    assert report["trained_steps"] == 3 and report["eval_steps_beyond"] == 4
    assert "last trained time step" in report["policy"]


def test_weightnorm_equals_g_v_over_norm_v(gen):
    wn = _randomize(WeightNormLinear(6, 4).double(), gen)
    x = torch.randn(3, 6, generator=gen, dtype=D)
    w = wn.g.unsqueeze(1) * wn.v / wn.v.norm(dim=1, keepdim=True)
    assert_close(wn(x), x @ w.T + wn.b)
    assert_close(wn.effective_weight().norm(dim=1), wn.g.abs())
    # the gradient flows to v and g (no torch parametrization involved)
    wn(x).sum().backward()
    assert wn.v.grad is not None and wn.g.grad is not None


def test_weightnorm_gain_init():
    assert torch.allclose(WeightNormLinear(3, 2, gain_init=0.1).g, torch.full((2,), 0.1))


def test_normlinear_normalizes_summed_inputs_before_bias(gen):
    layer = _randomize(NormLinear(5, 4, LayerNorm(4)).double(), gen)
    x = torch.randn(3, 5, generator=gen, dtype=D)
    a = x @ layer.weight.T
    assert_close(layer.summed(x), a)
    expected = (
        layer.norm.gain
        * (a - a.mean(1, keepdim=True))
        / (a.var(1, unbiased=False, keepdim=True) + 1e-5).sqrt()
        + layer.norm.bias
    )
    assert_close(layer(x), expected)
    assert not any(n == "bias" for n, _ in layer.named_parameters(recurse=False))


@pytest.mark.parametrize(
    "norm,cls,names",
    [
        ("none", PlainLinear, {"weight", "bias"}),
        ("weight", WeightNormLinear, {"v", "g", "b"}),
        ("layer", NormLinear, {"weight", "norm.gain", "norm.bias"}),
        ("batch", NormLinear, {"weight", "norm.gain", "norm.bias"}),
        ("rms", NormLinear, {"weight", "norm.gain", "norm.bias"}),
    ],
)
def test_make_linear_parameter_names(norm, cls, names):
    layer = make_linear(norm, 3, 2, gain_init=0.5)
    assert type(layer) is cls
    assert {n for n, _ in layer.named_parameters()} == names
    if norm not in ("none",):
        gain = layer.g if norm == "weight" else layer.norm.gain
        assert torch.allclose(gain, torch.full((2,), 0.5))
