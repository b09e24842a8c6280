"""The √(2ηλ) line on the effective-step panel: drawn for SGD with weight decay at its formula's value,
absent where the law does not apply (Adam, no decay)."""

from __future__ import annotations

import math

import pytest

from frontend import probe_figures
from frontend.theory_lines import angular_line
from tests.frontend.test_probe_figures import _fisher


def _events():
    events = [_fisher(1, 2), _fisher(5, 2)]
    for e in events:
        for g in e["payload"]["groups"]:
            g["effective_step"], g["optimizer"] = 0.03, "sgd"
    return events


def test_the_equilibrium_is_drawn_for_sgd_with_weight_decay():
    spec = {"optimizer": "sgd", "lr": 0.1, "weight_decay": 0.01, "momentum": 0.9}
    fig = probe_figures.fisher_figure(_events(), spec=spec)
    (line,) = [t for t in fig["data"] if "equilibrium" in (t.get("name") or "")]
    assert list(line["y"]) == pytest.approx([math.sqrt(2 * 0.1 * 0.01 / 1.9)] * 2)
    assert list(line["x"]) == [1, 5] and line["legend"] == "legend4"


@pytest.mark.parametrize(
    "spec",
    [
        None,
        {"optimizer": "adam", "lr": 0.1, "weight_decay": 0.01},
        {"optimizer": "sgd", "lr": 0.1, "weight_decay": 0.0, "momentum": 0.0},
    ],
)
def test_no_line_where_the_law_does_not_apply(spec):
    assert angular_line(spec) is None
    fig = probe_figures.fisher_figure(_events(), spec=spec)
    assert not [t for t in fig["data"] if "equilibrium" in (t.get("name") or "")]
