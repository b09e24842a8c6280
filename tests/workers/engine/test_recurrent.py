"""Recurrent layers against hand-written float64 references of eq. 4, 17, 20, 23, 26, 29 and recurrent BN."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from workers.engine.lstm_seq import lstm_sequence
from workers.engine.recurrent import GRULayer, LSTMLayer, TanhRNNLayer, make_layer

D = torch.float64
T, B, IN, H = 6, 3, 4, 5
EPS = 1e-5


def ln(z, gain, bias):
    """Eq. 15 by hand: population statistics over the last dim."""
    mu = z.sum(-1, keepdim=True) / z.shape[-1]
    sigma2 = ((z - mu) ** 2).sum(-1, keepdim=True) / z.shape[-1]
    return (z - mu) / torch.sqrt(sigma2 + EPS) * gain + bias


def lnm(z, layer):
    """LN with the gain and bias of a NormLinear's normalizer."""
    return ln(z, layer.norm.gain, layer.norm.bias)


def sig(z):
    return 1 / (1 + torch.exp(-z))


def _random_params(layer, seed=7):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=D) * 0.7)
    return layer


@pytest.fixture
def x():
    return torch.randn(T, B, IN, generator=torch.Generator().manual_seed(3), dtype=D)


def _lstm_reference(layer, x, ln_gates: bool, ln_cell: bool):
    h = torch.zeros(B, H, dtype=D)
    c = torch.zeros(B, H, dtype=D)
    out = []
    for t in range(T):
        hh, xx = h @ layer.hh.weight.T, x[t] @ layer.ih.weight.T
        if ln_gates:  # eq. 20
            a = lnm(hh, layer.hh) + lnm(xx, layer.ih)
        else:  # eq. 17 / eq. 29
            a = hh + xx
        a = a + layer.bias
        f, i, o, g = a[:, :H], a[:, H : 2 * H], a[:, 2 * H : 3 * H], a[:, 3 * H :]
        c = sig(f) * c + sig(i) * torch.tanh(g)
        cn = ln(c, layer.norm_c.gain, layer.norm_c.bias) if ln_cell else c
        h = sig(o) * torch.tanh(cn)
        out.append(h)
    return torch.stack(out)


@pytest.mark.parametrize(
    "norm,placement,ln_gates,ln_cell",
    [
        ("layer", "full", True, True),  # eq. 20
        ("layer", "cell", False, True),  # eq. 29
        ("none", "full", False, False),  # eq. 17
    ],
)
def test_lstm_equals_hand_written_equations(x, norm, placement, ln_gates, ln_cell):
    layer = _random_params(LSTMLayer(IN, H, norm, placement=placement).double())
    expected = _lstm_reference(layer, x, ln_gates, ln_cell)
    assert_close(layer(x), expected, rtol=1e-10, atol=1e-12)  # the fused sequence path
    assert_close(layer(x, record={}), expected, rtol=1e-10, atol=1e-12)  # the step-by-step path


def test_lstm_fused_gradients_equal_step_by_step(x):
    layer = _random_params(LSTMLayer(IN, H, "layer").double())
    xr = x.clone().requires_grad_()
    w = torch.randn(T, B, H, generator=torch.Generator().manual_seed(5), dtype=D)
    (layer(xr) * w).sum().backward()
    fused = [p.grad.clone() for p in layer.parameters()] + [xr.grad.clone()]
    layer.zero_grad()
    xr.grad = None
    (layer(xr, record={}) * w).sum().backward()
    slow = [p.grad for p in layer.parameters()] + [xr.grad]
    for a, b in zip(fused, slow, strict=True):
        assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("ln_h,ln_c", [(True, True), (True, False), (False, True), (False, False)])
def test_lstm_sequence_gradcheck(ln_h, ln_c):
    g = torch.Generator().manual_seed(11)
    n, b, h = 3, 2, 3

    def mk(*shape):
        return torch.randn(*shape, generator=g, dtype=D).requires_grad_()

    args = (
        mk(n, b, 4 * h),
        mk(4 * h, h),
        mk(4 * h) if ln_h else None,
        mk(4 * h) if ln_h else None,
        mk(h) if ln_c else None,
        mk(h) if ln_c else None,
        mk(b, h),
        mk(b, h),
    )
    assert torch.autograd.gradcheck(lambda *a: lstm_sequence(*a), args)


def test_lstm_sequence_survives_a_retained_second_backward():
    g = torch.Generator().manual_seed(2)
    xx = torch.randn(4, 2, 12, generator=g, dtype=D, requires_grad=True)
    w = torch.randn(12, 3, generator=g, dtype=D, requires_grad=True)
    p = [torch.randn(12, generator=g, dtype=D, requires_grad=True) for _ in range(2)]
    q = [torch.randn(3, generator=g, dtype=D, requires_grad=True) for _ in range(2)]
    out = lstm_sequence(xx, w, *p, *q, torch.zeros(2, 3, dtype=D), torch.zeros(2, 3, dtype=D)).sum()
    first = torch.autograd.grad(out, [w, *p, *q], retain_graph=True)
    second = torch.autograd.grad(out, [w, *p, *q])
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


def test_gru_equals_eq26(x):
    layer = _random_params(GRULayer(IN, H, "layer").double())
    h = torch.zeros(B, H, dtype=D)
    out = []
    for t in range(T):
        zr = lnm(h @ layer.hh_gates.weight.T, layer.hh_gates)
        zr = zr + lnm(x[t] @ layer.ih_gates.weight.T, layer.ih_gates)
        z, r = sig(zr[:, :H]), sig(zr[:, H:])
        cand = torch.tanh(
            lnm(x[t] @ layer.ih_cand.weight.T, layer.ih_cand)
            + r * lnm(h @ layer.hh_cand.weight.T, layer.hh_cand)
        )
        h = (1 - z) * h + z * cand
        out.append(h)
    assert_close(layer(x), torch.stack(out), rtol=1e-10, atol=1e-12)


def test_gru_none_equals_eq23_with_input_biases(x):
    layer = _random_params(GRULayer(IN, H, "none").double())
    h = torch.zeros(B, H, dtype=D)
    out = []
    for t in range(T):
        zr = h @ layer.hh_gates.weight.T + x[t] @ layer.ih_gates.weight.T + layer.ih_gates.bias
        z, r = sig(zr[:, :H]), sig(zr[:, H:])
        u_h = h @ layer.hh_cand.weight.T
        cand = torch.tanh(x[t] @ layer.ih_cand.weight.T + layer.ih_cand.bias + r * u_h)
        h = (1 - z) * h + z * cand
        out.append(h)
    assert_close(layer(x), torch.stack(out), rtol=1e-10, atol=1e-12)


def test_tanh_rnn_equals_eq4(x):
    layer = _random_params(TanhRNNLayer(IN, H, "layer").double())
    w = layer.proj.weight
    w_xh, w_hh = w[:, :IN], w[:, IN:]
    h = torch.zeros(B, H, dtype=D)
    out = []
    for t in range(T):
        a = w_hh @ h.T + w_xh @ x[t].T  # a^t = W_hh h^{t−1} + W_xh x^t, one column per case
        a = a.T
        mu = a.mean(1, keepdim=True)
        sigma = ((a - mu) ** 2).mean(1, keepdim=True).add(EPS).sqrt()
        h = torch.tanh(layer.proj.norm.gain / sigma * (a - mu) + layer.proj.norm.bias)
        out.append(h)
    assert_close(layer(x), torch.stack(out), rtol=1e-10, atol=1e-12)


def test_recurrent_batchnorm_lstm_uses_per_step_batch_statistics(x):
    layer = _random_params(LSTMLayer(IN, H, "batch", max_steps=T).double())

    def bn(z, mod):
        mu, var = z.mean(0), z.var(0, unbiased=False)
        return mod.gain * (z - mu) / torch.sqrt(var + EPS) + mod.bias

    h = torch.zeros(B, H, dtype=D)
    c = torch.zeros(B, H, dtype=D)
    out = []
    for t in range(T):
        a = bn(h @ layer.hh.weight.T, layer.hh.norm) + bn(x[t] @ layer.ih.weight.T, layer.ih.norm)
        a = a + layer.bias
        f, i, o, g = a.chunk(4, 1)
        c = sig(f) * c + sig(i) * torch.tanh(g)
        h = sig(o) * torch.tanh(bn(c, layer.norm_c))
        out.append(h)
    assert_close(layer(x), torch.stack(out), rtol=1e-9, atol=1e-11)
    # every time step got its own running statistics, and they differ between steps
    rm = layer.ih.norm.running_mean
    assert rm.shape == (T, 4 * H) and int(layer.ih.norm.trained_steps) == T
    assert not torch.allclose(rm[0], rm[1])


def test_weightnorm_lstm_uses_g_v_over_norm(x):
    layer = _random_params(LSTMLayer(IN, H, "weight").double())

    def wn(m):
        return m.g.unsqueeze(1) * m.v / m.v.norm(dim=1, keepdim=True)

    h = torch.zeros(B, H, dtype=D)
    c = torch.zeros(B, H, dtype=D)
    out = []
    for t in range(T):
        a = h @ wn(layer.hh).T + x[t] @ wn(layer.ih).T + layer.bias
        f, i, o, g = a.chunk(4, 1)
        c = sig(f) * c + sig(i) * torch.tanh(g)
        h = sig(o) * torch.tanh(c)
        out.append(h)
    assert_close(layer(x), torch.stack(out), rtol=1e-10, atol=1e-12)


def test_lstm_forget_bias_starts_at_one():
    layer = LSTMLayer(IN, H, "layer")
    assert torch.equal(layer.bias[:H], torch.ones(H)) and torch.equal(layer.bias[H:], torch.zeros(3 * H))


def test_make_layer_refuses_unknown_combinations():
    with pytest.raises(ValueError, match="cell"):
        make_layer("rnn", 2, 3, "layer", 1.0)
    with pytest.raises(ValueError, match="group"):
        make_layer("lstm", 2, 3, "group", 1.0)


def test_recurrence_thread_choice_never_changes_the_numbers():
    # the loop runs on one thread on a busy machine and on all threads otherwise: bitwise the same
    # (float32: the C step where a compiler exists, its batch rows split over the threads)
    from workers.engine.options import EngineOptions

    torch.manual_seed(0)
    layer = LSTMLayer(16, 32, "layer")
    x = torch.randn(7, 8, 16)
    results = []
    for n in (1, max(2, torch.get_num_threads())):
        layer.engine_options = EngineOptions(recurrence_threads=n)
        layer.zero_grad()
        out = layer(x)
        out.square().sum().backward()
        results.append([out.detach()] + [p.grad.clone() for p in layer.parameters()])
        with torch.no_grad():  # evaluation keeps one step of buffers: the same numbers
            assert torch.equal(layer(x), out.detach())
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="≥ 1"):
        EngineOptions(recurrence_threads=0)


def test_lstm_sequence_without_grad_keeps_one_step_of_buffers_and_equal_numbers():
    from workers.engine import lstm_seq

    g = torch.Generator().manual_seed(4)
    xx = torch.randn(9, 3, 8, generator=g, dtype=D)
    w = torch.randn(8, 2, generator=g, dtype=D, requires_grad=True)
    params = [torch.randn(n, generator=g, dtype=D) for n in (8, 8, 2, 2)]
    h0 = c0 = torch.zeros(3, 2, dtype=D)
    with_grad = lstm_sequence(xx, w, *params, h0, c0)
    assert with_grad.requires_grad
    with torch.no_grad():
        lean = lstm_sequence(xx, w, *params, h0, c0)
    assert torch.equal(lean, with_grad.detach())
    hs, (gates, cells, _, hh, _, _) = lstm_seq._forward(xx, w.detach(), *params, h0, c0, 1e-5, keep=False)
    assert gates.shape[0] == cells.shape[0] == hh.shape[0] == 1 and hs.shape[0] == 9
