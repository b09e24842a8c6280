"""`normlab bench probes`: one task end to end at a short length — the keys, the bookkeeping and the cost
of an estimate as a run pays it (not speed)."""

from __future__ import annotations

import pytest
import torch

from benchmarks import probes as bench


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny nets: one thread is fastest, and CI's 2 cores are shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
    assert out["planned_cold_steps"] >= out["planned_warm_steps"] > 0  # the run's plan, beside the measured
    assert out["planned_estimates"] == out["fisher_estimates"]  # every run gets the planned estimates


def test_an_estimate_s_cost_includes_the_weight_sets_measured_update(settings, monkeypatch):
    # a run pays for the angle and size of each set's next update with its estimate; so does the bench
    from workers.probes import weight_sets

    calls = []
    real = weight_sets.add_update
    monkeypatch.setattr(weight_sets, "add_update", lambda *a, **k: calls.append(a[1].name) or real(*a, **k))
    monkeypatch.setattr(bench, "ESTIMATES", 2)
    cold, warm = bench.estimate_costs("digits", "layer", settings)
    assert len(cold) == 2 and len(warm) == 2
    assert len(calls) == 4 * 3  # 4 estimates × the digits MLP's 3 weight sets


class _Result:
    status = "completed"
    probes = {
        "overhead": 0.05,
        "plan": {"fisher_count": 1, "planned_share": 0.1, "cold_cost_steps": 5.0, "warm_cost_steps": 3.0},
    }


def _fake_runs(monkeypatch, cpu_of):
    """bench._train replaced: each call's (probes on?, CPU seconds from cpu_of(call number, on))."""
    from types import SimpleNamespace

    calls: list[bool] = []

    def fake(spec, settings):
        on = spec.probes.enabled
        calls.append(on)
        ev = [SimpleNamespace(kind="scalars", payload={"elapsed": 1.0}, step=spec.steps)]
        if on:
            ev.append(SimpleNamespace(kind="fisher", payload={"cost_steps": 3.0}, step=5))
        return _Result(), ev, cpu_of(len(calls), on)

    monkeypatch.setattr(bench, "_train", fake)
    monkeypatch.setattr(bench, "estimate_costs", lambda *a: ([4.0], [3.0]))
    return calls


def test_overhead_pairs_alternate_their_order_and_cancel_a_drift(settings, monkeypatch):
    # the host slows down 1 % a run; the probes cost 10 %: every pair's ratio reads 10 % within the drift
    calls = _fake_runs(monkeypatch, lambda n, on: (1 + 0.01 * n) * (1.1 if on else 1.0))
    out = bench.bench_task("digits", "layer", steps=50, repeat=4, settings=settings)
    assert calls[0] is True  # the warm-up run, with probes
    assert calls[1:] == [False, True, True, False, False, True, True, False]  # ABBA
    assert out["pairs"] == 4 and len(out["overhead_paired_all"]) == 4
    assert out["overhead_paired"] == pytest.approx(0.10, abs=0.005)
    ratios = [a / b - 1 for a, b in zip(out["on_cpu_all"], out["off_cpu_all"], strict=True)]
    assert out["overhead_paired_all"] == pytest.approx(ratios)


def test_a_short_task_gets_more_pairs_until_min_seconds_of_cpu(settings, monkeypatch):
    _fake_runs(monkeypatch, lambda n, on: 0.5)
    monkeypatch.setattr(bench, "MAX_PAIRS", 6)
    assert bench.bench_task("digits", "layer", 50, 2, settings, min_seconds=1.4)["pairs"] == 3  # 3 × 0.5 s
    assert bench.bench_task("digits", "layer", 50, 2, settings, min_seconds=100.0)["pairs"] == 6  # capped
    assert bench.bench_task("digits", "layer", 50, 2, settings, min_seconds=0.0)["pairs"] == 2
