"""Probe figures from a run's events: hidden-state heatmaps, feed-forward layers, Fisher curvature."""

from __future__ import annotations

import math

import pytest

from frontend import probe_figures


def test_hidden_heatmap_is_log10_of_the_norms_with_latest_snapshot():
    events = [{"kind": "hidden", "step": s, "payload": {"hidden_norms": [1.0, 10.0, 100.0 * s],
                                                       "grad_norms": [0.1, 0.01, 0.001], "time_steps": 3}}
              for s in (1, 2)]
    fig = probe_figures.hidden_figure(events)
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    lines = [t for t in fig["data"] if t["type"] == "scatter"]
    assert len(heat) == 2 and len(lines) == 2
    z = [x for r in heat[0]["z"] for x in r]
    assert z == pytest.approx([0.0, 1.0, 2.0, 0.0, 1.0, math.log10(200)])
    assert list(heat[0]["y"]) == [1, 2]
    assert list(lines[0]["y"]) == [1.0, 10.0, 200.0]  # the latest snapshot, as a line
    assert list(heat[1]["z"][0]) == pytest.approx([-1.0, -2.0, -3.0])


def test_hidden_figure_for_feed_forward_layers_and_when_empty():
    ev = {"kind": "hidden", "step": 5, "payload": {"layers": [
        {"name": "fc1", "summed_mean": 0.0, "summed_std": 2.0, "act_norm": 3.0},
        {"name": "fc2", "summed_mean": 0.0, "summed_std": 1.0, "act_norm": 1.5}]}}
    fig = probe_figures.hidden_figure([ev])
    assert {t["name"] for t in fig["data"]} == {"fc1", "fc2"}
    empty = probe_figures.hidden_figure([])
    assert not empty["data"] and "Waiting" in str(empty["layout"]["annotations"])


def _fisher(step, groups):
    return {"kind": "fisher", "step": step, "payload": {
        "trace": {"fc1": 2.0, "fc2": 1.0}, "trace_estimator": {"fc1": "per-sample", "fc2": "summed-gradient"},
        "lambda_max": 10.0, "eta_lambda_max": 0.5 * step, "hessian_lambda_max": None, "cost_steps": 0.4,
        "empirical": None, "groups": [
            {"name": f"g{i}", "weight_norm": 1.0 + i, "effective_lr": 0.1, "along_w_curvature": 0.0,
             "gain_curvature": 1.0} for i in range(groups)]}}


def test_fisher_figure_names_estimators_and_summarises_many_groups():
    fig = probe_figures.fisher_figure([_fisher(1, 3), _fisher(2, 3)])
    names = [t.get("name") for t in fig["data"]]
    assert "fc1 (per-sample)" in names and "fc2 (summed-gradient)" in names
    eta = next(t for t in fig["data"] if t.get("name") == "η·λ_max(F)")
    assert list(eta["y"]) == [0.5, 1.0]
    assert any(s.get("y0") == 2.0 for s in fig["layout"]["shapes"])  # the stability line at 2
    many = probe_figures.fisher_figure([_fisher(1, 20)])
    wnames = {t["name"] for t in many["data"] if "groups" in str(t.get("name"))}
    assert wnames == {"min of 20 groups", "median of 20 groups", "max of 20 groups"}
    wmax = next(t for t in many["data"] if t["name"] == "max of 20 groups" and t["y"][0] == 20.0)
    assert wmax is not None
