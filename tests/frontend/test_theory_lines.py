"""The √(2ηλ) line on the effective-step panel: drawn for SGD with weight decay at its formula's value,
absent where the law does not apply (Adam, no decay)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from frontend import probe_figures
from frontend.theory_lines import angular_line, norm_growth_applies
from tests.frontend.test_probe_figures import _fisher


def _events():
    events = [_fisher(1, 2), _fisher(5, 2)]
    for e in events:
        for g in e["payload"]["weight_sets"]:
            g["effective_step"], g["optimizer"] = 0.03, "sgd"
    return events


def test_the_equilibrium_is_drawn_for_sgd_with_weight_decay():
    spec = {"optimizer": "sgd", "lr": 0.1, "weight_decay": 0.01, "momentum": 0.9}
    fig = probe_figures.fisher_figure(_events(), spec=spec)
    (line,) = [t for t in fig["data"] if "equilibrium" in (t.get("name") or "")]
    assert list(line["y"]) == pytest.approx([math.sqrt(2 * 0.1 * 0.01 / 1.9)] * 2)
    assert list(line["x"]) == [1, 5] and line["xaxis"] == "x4"  # the effective-step subplot


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


def _sgd_step(seed: int = 0, lr: float = 0.7):
    """One plain SGD step on a scale-invariant loss ℓ(w) = cᵀ(w/‖w‖) in float64, independently of
    normlab.theory: ‖w_t‖, ‖g_t‖ and the ‖w_{t+1}‖ the step really reaches."""
    rng = np.random.default_rng(seed)
    w, c = rng.normal(size=50), rng.normal(size=50)
    n = np.linalg.norm(w)
    u = w / n
    g = (c - u * (u @ c)) / n  # ∇ of cᵀw/‖w‖
    return n, float(np.linalg.norm(g)), float(np.linalg.norm(w - lr * g)), lr


def _growth_events(next_scale: float = 1.0, curvature: float = 0.0):
    events = []
    for step, seed in ((10, 0), (20, 1)):
        n, g, after, lr = _sgd_step(seed)
        weight_set = {
            "name": "hidden.0.weight",
            "scale_invariant": True,
            "kind": "matrix",
            "weight_norm": n,
            "grad_norm": g,
            "effective_lr": lr / n**2,
            "weight_norm_next": math.sqrt(n**2 + next_scale * (after**2 - n**2)),
            "along_w_curvature": curvature if step == 20 else 0.0,
            "trace_ww": 2.0,
            "gain_curvature": None,
        }
        events.append({"kind": "fisher", "step": step, "payload": {"trace": {}, "weight_sets": [weight_set]}})
    return events


PLAIN_SGD = {"optimizer": "sgd", "lr": 0.7, "momentum": 0.0, "weight_decay": 0.0}


def test_the_norm_growth_law_is_drawn_at_what_a_real_sgd_step_reaches_and_nothing_is_shaded():
    fig = probe_figures.fisher_figure(_growth_events(), spec=PLAIN_SGD)
    (law,) = [t for t in fig["data"] if (t.get("name") or "").startswith("law: ")]
    assert list(law["x"]) == [11, 21] and law["legend"] == "legend3"
    assert list(law["y"]) == pytest.approx([_sgd_step(0)[2], _sgd_step(1)[2]], rel=1e-12)
    assert not [t for t in fig["data"] if "departs" in (t.get("name") or "")]


def test_a_step_that_grows_half_again_as_much_as_the_law_is_shaded():
    fig = probe_figures.fisher_figure(_growth_events(next_scale=1.5), spec=PLAIN_SGD)
    (off,) = [t for t in fig["data"] if (t.get("name") or "").startswith("departs from the law")]
    assert list(off["x"]) == [11, 21] and off["legend"] == "legend3"
    assert list(off["y"]) == pytest.approx(
        [e["payload"]["weight_sets"][0]["weight_norm_next"] for e in _growth_events(1.5)]
    )


@pytest.mark.parametrize(
    "spec",
    [
        None,
        {"optimizer": "adam", "lr": 0.7},
        {**PLAIN_SGD, "momentum": 0.9},
        {**PLAIN_SGD, "weight_decay": 1e-4},
        {**PLAIN_SGD, "interventions": [{"step": 5, "momentum": 0.5}]},
    ],
)
def test_no_norm_growth_law_where_it_does_not_hold(spec):
    assert not norm_growth_applies(spec)
    fig = probe_figures.fisher_figure(_growth_events(), spec=spec)
    assert not [t for t in fig["data"] if (t.get("name") or "").startswith("law: ")]


def test_the_zero_line_of_u_f_u_and_a_departure_shaded():
    fig = probe_figures.fisher_figure(_growth_events())
    (zero,) = [t for t in fig["data"] if (t.get("name") or "").startswith("uᵀFu = 0")]
    assert list(zero["y"]) == [0.0, 0.0] and list(zero["x"]) == [10, 20] and zero["legend"] == "legend5"
    assert not [t for t in fig["data"] if (t.get("name") or "").startswith("departs from 0")]
    fig = probe_figures.fisher_figure(_growth_events(curvature=0.01))  # 0.5 % of the trace 2.0
    (off,) = [t for t in fig["data"] if (t.get("name") or "").startswith("departs from 0")]
    assert list(off["x"]) == [20] and list(off["y"]) == [0.01]
    # no scale-invariant set: no zero line
    events = _growth_events()
    for e in events:
        e["payload"]["weight_sets"][0]["scale_invariant"] = False
    fig = probe_figures.fisher_figure(events)
    assert not [t for t in fig["data"] if (t.get("name") or "").startswith("uᵀFu = 0")]
