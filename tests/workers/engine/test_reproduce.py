"""`workers.engine.reproduce`: aggregation over seeds, the direction rules, and the paper's directions that
hold robustly on this data (fig6-batch4, online, LN's steadier ‖h_t‖ in long-sequences), run at reduced
steps."""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest

from normlab.presets import PRESETS
from normlab.spec import ProbeSpec
from workers.engine import train
from workers.engine.reproduce import (
    RULES,
    aggregate,
    curve_summary,
    hidden_spread,
    judge,
    metric_key,
    reproduce,
)


def _records(values, curves=None):
    curves = curves or [[(10, 2.0), (20, v)] if v is not None else [(10, 2.0)] for v in values]
    return [{"seed": s, "status": "completed" if v is not None else "diverged", "value": v, "curve": c,
             "wall_time": 1.0} for s, (v, c) in enumerate(zip(values, curves, strict=True))]


def test_aggregate_mean_sample_std_and_per_seed_values():
    spec = PRESETS["fig6-batch4"].runs[0].resolved()
    out = aggregate("batch", spec, _records([0.5, 0.7, 0.9]), "val_loss")
    assert out["values"] == [0.5, 0.7, 0.9] and out["seeds"] == [0, 1, 2]
    assert out["mean"] == pytest.approx(0.7)
    assert out["std"] == pytest.approx(statistics.stdev([0.5, 0.7, 0.9]))  # sample std (n − 1)
    assert out["n_ok"] == 3 and out["wall_time"] == 3.0
    assert "seed" not in out["spec"]


def test_aggregate_leaves_diverged_seeds_out_of_the_mean_and_says_so():
    spec = PRESETS["fig6-batch4"].runs[0].resolved()
    out = aggregate("batch", spec, _records([0.4, None, 0.6]), "val_loss")
    assert out["mean"] == pytest.approx(0.5) and out["n_ok"] == 2
    assert out["statuses"] == ["completed", "diverged", "completed"]


def test_curve_summary_averages_over_seeds_and_integrates_by_trapezoids():
    curves = [[(25, 2.0), (50, 1.0), (100, 0.5)], [(25, 4.0), (50, 1.0), (100, 0.7)]]
    out = curve_summary(curves, steps=100)
    assert out["steps"] == [25, 50, 100] and out["mean"] == pytest.approx([3.0, 1.0, 0.6])
    assert [(a["step"], a["value"]) for a in out["at"]] == [(25, 3.0), (50, 1.0), (100, pytest.approx(0.6))]
    area = 25 * (3.0 + 1.0) / 2 + 50 * (1.0 + 0.6) / 2
    assert out["auc"] == pytest.approx(area / 75)


def test_curve_summary_marks_fractions_before_the_first_evaluation():
    out = curve_summary([[(50, 1.0), (100, 0.8)]], steps=100)
    assert out["at"][0] == {"fraction": 0.25, "step": None, "value": None}
    assert out["at"][1]["step"] == 50 and out["at"][2]["step"] == 100


def _runs(**values):
    return {lab: {"seeds": list(range(len(v))), "values": v, "mean": statistics.fmean(v)}
            for lab, v in values.items()}


def test_better_holds_on_means_and_reports_seeds_where_it_fails():
    runs = _runs(layer=[0.3, 0.5, 0.2], batch=[0.6, 0.4, 0.9])
    c = judge(("better", "layer", "batch"), runs, "val_loss", PRESETS["fig6-batch4"], None)
    assert c["holds"] and not c["all_seeds"]  # seed 1: 0.5 > 0.4
    c = judge(("better", "layer", "batch"), runs, "accuracy", PRESETS["fig6-batch4"], None)
    assert not c["holds"]  # for accuracy higher is better


def test_close_uses_the_stated_tolerance():
    near = _runs(layer=[0.10, 0.11], batch=[0.11, 0.12])
    far = _runs(layer=[0.10, 0.10], batch=[0.20, 0.20])
    rule = ("close", "layer", "batch")
    assert judge(rule, near, "val_loss", PRESETS["fig6-batch128"], None)["holds"]
    assert not judge(rule, far, "val_loss", PRESETS["fig6-batch128"], None)["holds"]


def test_gap_best_and_trains():
    runs = _runs(**{"layer g=1.0": [0.5, 0.6], "layer g=0.1": [0.55, 0.62],
                    "batch g=1.0": [0.5, 0.6], "batch g=0.1": [1.2, 1.1]})
    c = judge(RULES["gain-init"][0], runs, "val_loss", PRESETS["gain-init"], None)
    assert c["holds"] and c["all_seeds"] and c["gap_a"] < c["gap_b"]
    runs = _runs(none=[0.25, 0.25], layer=[0.1, 0.3], batch=[0.22, 0.26])
    c = judge(("best", "layer"), runs, "val_loss", PRESETS["long-sequences"], None)
    assert c["holds"] and not c["all_seeds"]
    c = judge(("trains", "layer"), _runs(layer=[1.0, 2.5]), "val_loss", PRESETS["online"], math.log(10))
    assert c["holds"] and not c["all_seeds"]  # 2.5 is above ln 10 ≈ 2.303


def test_metric_key():
    assert metric_key("val_loss") == "val_loss" and metric_key("accuracy") == "val_accuracy"


def test_every_preset_has_a_rule_naming_its_own_runs():
    for name, preset in PRESETS.items():
        for rule in RULES.get(name, []):
            if rule[0] != "refused":
                assert set(rule[1:]) <= set(preset.run_labels()), (name, rule)


def test_a_tiny_reproduction_matches_the_engine_run_by_run(settings):
    out = reproduce("fig6-batch4", seeds=[0, 1], steps=3, settings=settings)
    assert [r["label"] for r in out["runs"]] == ["batch", "layer"]
    for run in out["runs"]:
        assert run["statuses"] == ["completed", "completed"] and len(run["values"]) == 2
        assert run["curve"]["steps"] == [3]  # steps < eval_every: one evaluation, at the last step
    spec = PRESETS["fig6-batch4"].runs[1].model_copy(update={"steps": 3, "seed": 1})
    direct = train(spec, settings=settings)
    assert out["runs"][1]["values"][1] == pytest.approx(direct.metrics["val_loss"], rel=1e-5)
    assert out["direction"]["claims"][0]["claim"] == "layer better than batch"


@pytest.mark.slow
def test_layernorm_beats_batchnorm_at_batch_size_4_on_every_seed(settings):
    out = reproduce("fig6-batch4", seeds=[0, 1, 2], steps=120, settings=settings)
    layer, batch = (next(r for r in out["runs"] if r["label"] == lab) for lab in ("layer", "batch"))
    assert all(x < y for x, y in zip(layer["values"], batch["values"], strict=True))
    assert out["direction"]["all_seeds"]


@pytest.mark.slow
def test_layernorm_trains_online_and_batchnorm_is_refused(settings):
    out = reproduce("online", seeds=[0, 1], steps=150, settings=settings)
    claims = {c["claim"].split(" (")[0]: c for c in out["direction"]["claims"]}
    assert claims["layer trains"]["all_seeds"]
    assert all(v < math.log(10) for v in out["runs"][1]["values"])
    refused = claims["norm 'batch' refused at batch size 1"]
    assert refused["holds"] and "batch size" in refused["message"] and "'layer'" in refused["message"]


@pytest.mark.slow
def test_layernorm_beats_no_normalization_in_the_convnet_on_every_seed(settings):
    full = PRESETS["convnets"]
    keep = [i for i, label in enumerate(full.run_labels()) if label in ("none", "layer")]
    preset = dataclasses.replace(full, runs=tuple(full.runs[i] for i in keep),
                                 labels=tuple(full.run_labels()[i] for i in keep))
    out = reproduce(preset, seeds=[0, 1], steps=60, settings=settings)
    claim = next(c for c in out["direction"]["claims"] if c["claim"] == "layer better than none")
    assert claim["all_seeds"], out["runs"]


def test_hidden_spread_is_max_over_min_of_the_last_trace():
    assert hidden_spread({"hidden": {"hidden_norms": [0.5, 2.0, 1.0]}}) == 4.0
    assert hidden_spread({"hidden": {"hidden_norms": [0.0, 1.0]}}) is None  # a zero norm: no ratio
    assert hidden_spread({"hidden": {"hidden_norms": [1.0, None]}}) is None  # a NaN sent as null
    assert hidden_spread({"hidden": None}) is None and hidden_spread(None) is None


def test_steadier_compares_hidden_norm_spreads_on_means_and_seeds():
    runs = _runs(none=[0.2, 0.2], layer=[0.2, 0.2])
    runs["none"]["hidden_spread"] = {"values": [4.0, 1.1], "mean": 2.55}
    runs["layer"]["hidden_spread"] = {"values": [1.2, 1.3], "mean": 1.25}
    c = judge(("steadier", "layer", "none"), runs, "val_loss", PRESETS["long-sequences"], None)
    assert c["holds"] and not c["all_seeds"] and c["spread_a"] == 1.25  # seed 1: 1.3 > 1.1
    runs["none"]["hidden_spread"] = None
    c = judge(("steadier", "layer", "none"), runs, "val_loss", PRESETS["long-sequences"], None)
    assert not c["holds"] and "probes" in c["message"]


def test_long_sequences_traces_hidden_states_and_ln_is_steadier(settings):
    # The preset at a tenth of its length and steps: without normalization ‖h_t‖ grows from the zero
    # state over the first time steps; with LN it starts at full scale and stays flat.
    full = PRESETS["long-sequences"]
    keep = [i for i, label in enumerate(full.run_labels()) if label in ("none", "layer")]
    runs = tuple(full.runs[i].model_copy(update={"seq_len": 20, "eval_seq_len": 40,
                                                 "probes": ProbeSpec(enabled=True, trace_every=5)})
                 for i in keep)
    preset = dataclasses.replace(full, runs=runs, labels=("none", "layer"))
    out = reproduce(preset, seeds=[0, 1], steps=20, settings=settings)
    spreads = {r["label"]: r["hidden_spread"] for r in out["runs"]}
    assert all(len(s["values"]) == 2 and None not in s["values"] for s in spreads.values()), spreads
    claim = next(c for c in out["direction"]["claims"] if c["claim"].startswith("layer steadier"))
    assert claim["holds"] and claim["all_seeds"], spreads
