"""Weight Standardization (workers/engine/models.py) against its definition in float64, in the ConvNet."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers.engine.models import WS_EPS, build_model, standardize_weight


def test_each_filter_is_standardized_over_its_fan_in_by_the_definition_in_float64():
    torch.manual_seed(0)
    w = (3.0 * torch.randn(5, 4, 3, 3, dtype=torch.float64) + 0.7).requires_grad_()
    got = standardize_weight(w)
    for i in range(5):
        vals = [float(v) for v in w[i].detach().reshape(-1)]
        mu = sum(vals) / len(vals)
        var = sum((v - mu) ** 2 for v in vals) / len(vals)  # population variance over c_in × 3 × 3
        want = torch.tensor([(v - mu) / math.sqrt(var + WS_EPS) for v in vals], dtype=torch.float64)
        torch.testing.assert_close(got[i].reshape(-1), want, rtol=1e-12, atol=1e-12)
    # the result is invariant to each filter's scale and shift (up to eps), and gradients reach W
    torch.testing.assert_close(standardize_weight(4.0 * w + 2.0), got, rtol=0, atol=1e-5)
    got.pow(3).sum().backward()
    assert w.grad is not None and torch.isfinite(w.grad).all()
    assert torch.autograd.gradcheck(standardize_weight, (w.detach().clone().requires_grad_(),))


def test_the_convnet_convolves_with_the_standardized_filters_only_when_asked():
    spec = RunSpec(task="conv-digits", norm="group", hidden_size=8, weight_standardization=True).resolved()
    torch.manual_seed(1)
    model = build_model(spec, TASKS["conv-digits"], 64, 10).double()
    conv = model.convs[0]
    x = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    want = F.conv2d(x, standardize_weight(conv.weight), padding=1)
    torch.testing.assert_close(conv.summed(x), want)
    unstandardized = spec.model_copy(update={"weight_standardization": False})
    plain = build_model(unstandardized, TASKS["conv-digits"], 64, 10).double()
    plain.load_state_dict(model.state_dict())
    torch.testing.assert_close(plain.convs[0].summed(x), F.conv2d(x, conv.weight, padding=1))
    assert not torch.allclose(plain(x), model(x))


@pytest.mark.parametrize(
    "fields", [{"task": "digits", "norm": "layer"}, {"task": "conv-digits", "norm": "none"}]
)
def test_weight_standardization_without_a_conv_normalizer_is_refused_with_its_field(fields):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as err:
        RunSpec(**fields, weight_standardization=True)
    assert err.value.errors()[0]["ctx"]["fields"] == ["weight_standardization"]
