"""The MLP's tangent pass (workers.probes.tangent) against the double backward and brute force."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, jacrev

from workers.engine.models import MLP
from workers.probes.fisher import FisherPass, RecordedForward
from workers.probes.likelihood import Likelihood
from workers.probes.tangent import MLPTangent

from .conftest import tiny


def _random(fp, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in fp.params]


@pytest.mark.parametrize("norm", ["layer", "none"])
def test_tangent_pass_is_the_jacobian_vector_product(norm):
    """J v from the tangent pass equals the double backward's and the brute-force Jacobian's (float64),
    and the trace pass then keeps no differentiable backward graph."""
    model, x, y = tiny(norm, seed=5)
    fp = FisherPass(model, Likelihood("class"), x, y)
    assert fp._tangent is not None
    fp.sampled(Likelihood("class").sampled_residual(fp.pred, torch.Generator().manual_seed(0)))
    assert fp._gu is None  # no create_graph backward was needed
    names = [n for n, _ in model.named_parameters()]
    params = {n: p.detach() for n, p in model.named_parameters()}
    jac = jacrev(lambda ps: functional_call(model, ps, (x,)))(params)
    for seed in (1, 2):
        v = _random(fp, seed)
        got = fp.jv(v)
        want = sum(torch.einsum("bc...,...->bc", jac[n], t) for n, t in zip(names, v, strict=True))
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(got, fp.jvp(v), rtol=1e-12, atol=1e-14)


def test_tangent_pass_on_a_float32_digits_sized_mlp():
    torch.manual_seed(0)
    model = MLP(64, 256, 2, 10, "layer").train()
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    fp = FisherPass(model, Likelihood("class"), x, y)
    v = _random(fp, 3)
    got, want = fp.jv(v), fp.jvp(v)
    assert float((got - want).norm() / want.norm()) <= 1e-5


def test_tangent_pass_reuses_the_training_forward():
    """The training step's recorded forward qualifies too: the same J v as a pass with its own forward."""
    model, x, y = tiny("layer", seed=6)
    own = FisherPass(model, Likelihood("class"), x, y)
    rec = RecordedForward(model, own.layout, x.shape[0])
    with rec:
        out = model(x)
    reused = FisherPass(model, Likelihood("class"), x, y, layout=own.layout, recorded=rec, outputs=out)
    assert reused._tangent is not None
    v = _random(own, 4)
    torch.testing.assert_close(reused.jv(v), own.jv(v), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("norm", ["batch", "weight", "rms"])
def test_other_normalizers_keep_the_double_backward(norm):
    model, x, y = tiny(norm, seed=7)
    fp = FisherPass(model, Likelihood("class"), x, y)
    assert fp._tangent is None
    assert MLPTangent.of(model, fp.recorder, fp.names, fp.pred) is None


def test_no_tangent_pass_when_a_layer_ran_twice():
    """A record that is not one plain forward (here the first hidden layer called twice) does not qualify."""
    model, x, y = tiny("layer", seed=8)
    fp = FisherPass(model, Likelihood("class"), x, y)
    calls = fp.recorder.calls["hidden.0"]
    calls.append(list(calls[0]))
    assert MLPTangent.of(model, fp.recorder, fp.names, fp.pred) is None


def test_no_tangent_pass_when_a_method_was_replaced_on_an_instance():
    """The pass follows the class's forward: a layer whose `normalize` was replaced keeps the double
    backward (and its per-sample statistics their numeric check)."""
    model, x, y = tiny("layer", seed=9)
    original = model.hidden[1].normalize
    model.hidden[1].normalize = lambda a, step=None: original(a) + 0.1 * model.hidden[1].weight.sum(1)
    fp = FisherPass(model, Likelihood("class"), x, y)
    assert fp._tangent is None
    v = _random(fp, 5)
    jac = jacrev(lambda ps: functional_call(model, ps, (x,)))(
        {n: p.detach() for n, p in model.named_parameters()}
    )
    want = sum(torch.einsum("bc...,...->bc", jac[n], t) for n, t in zip(fp.names, v, strict=True))
    torch.testing.assert_close(fp.jv(v), want, rtol=1e-12, atol=1e-14)


def test_the_recorder_leaves_the_model_as_it_was():
    """No forward hooks and no instance attributes stay behind once a recorded forward is over."""
    model, x, y = tiny("layer", seed=10)
    before = {name: dict(vars(m)) for name, m in model.named_modules()}
    fp = FisherPass(model, Likelihood("class"), x, y)
    assert fp.recorder.calls  # it did record
    for name, m in model.named_modules():
        assert not m._forward_hooks and not m._forward_pre_hooks, name
        assert vars(m).keys() == before[name].keys(), name


def test_recorders_nest_and_keep_a_method_replaced_on_the_instance():
    """A recorder inside another one records too, and each puts back exactly what it found (here a
    `summed` the owner had replaced on the instance)."""
    model, x, y = tiny("layer", seed=11)
    layer = model.hidden[0]
    own = layer.summed
    layer.summed = own  # an instance attribute that was there before any recorder
    fp = FisherPass(model, Likelihood("class"), x, y)
    outer = RecordedForward(model, fp.layout, x.shape[0])
    inner = RecordedForward(model, fp.layout, x.shape[0])
    with outer:
        with inner:
            model(x)
        assert vars(layer)["summed"] is not own  # the outer recorder's wrapper is back
    assert vars(layer)["summed"] is own
    assert len(outer.recorder.calls["hidden.0"]) == len(inner.recorder.calls["hidden.0"]) == 1
