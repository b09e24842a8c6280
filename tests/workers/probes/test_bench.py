"""`normlab bench probes`: one task end to end at a short length — the keys, the bookkeeping and the cost
of an estimate as a run pays it (not speed)."""

from __future__ import annotations

import pytest

from workers.probes import bench


def test_bench_task_reports_overhead_estimates_and_costs_in_plain_steps(settings, monkeypatch):
    monkeypatch.setattr(bench, "ESTIMATES", 2)  # 2 warm estimates, 2 cold ones (the warm probe's first)
    out = bench.bench_task("digits", "layer", steps=120, repeat=1, settings=settings)
    assert (
        out["task"] == "digits"
        and out["steps"] == 120
        and out["fisher_estimates_all"] == [out["fisher_estimates"]]
    )
    assert out["fisher_estimates"] >= 1 and out["first_fisher_step"] == 5
    assert len(out["run_cost_steps"]) == out["fisher_estimates"] and min(out["run_cost_steps"]) > 0
    assert len(out["warm_costs"]) == 2 and len(out["cold_costs"]) == 2
    assert min(out["warm_costs"] + out["cold_costs"]) > 0
    assert out["cold_over_warm"] == pytest.approx(out["cold_cost_steps"] / out["warm_cost_steps"])
    assert out["overhead"] == pytest.approx(out["on_cpu_s"] / out["off_cpu_s"] - 1)
    assert out["overhead_min"] == pytest.approx(min(out["on_cpu_all"]) / min(out["off_cpu_all"]) - 1)
    assert len(out["on_cpu_all"]) == len(out["off_cpu_all"]) == 1


def test_an_estimate_s_cost_includes_the_groups_measured_update(settings, monkeypatch):
    # a run pays for the angle and size of each group's next update with its estimate; so does the bench
    from workers.probes import groups

    calls = []
    real = groups.add_update
    monkeypatch.setattr(groups, "add_update", lambda *a, **k: calls.append(a[1].name) or real(*a, **k))
    monkeypatch.setattr(bench, "ESTIMATES", 2)
    cold, warm = bench.estimate_costs("digits", "layer", settings)
    assert len(cold) == 2 and len(warm) == 2
    assert len(calls) == 4 * 3  # 4 estimates × the digits MLP's 3 weight groups
