"""normlab.arms and normlab.claims: aggregation over seeds, effect sizes paired by seed, and each rule's
verdict — the code shared by `normlab reproduce` and GET /api/groups/{id}, checked against hand
computations."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from normlab.arms import START, aggregate, curve_area, curve_summary, trace_stats
from normlab.claims import EQUIV_REL, judge, judge_all, metric_key
from normlab.presets import PRESETS


def _records(values, curves=None):
    curves = curves or [[(10, 2.0), (20, v)] if v is not None else [(10, 2.0)] for v in values]
    return [
        {
            "seed": s,
            "status": "completed" if v is not None else "diverged",
            "value": v,
            "curve": c,
            "wall_time": 1.0,
        }
        for s, (v, c) in enumerate(zip(values, curves, strict=True))
    ]


def _arms(**values):
    return {lab: aggregate(lab, {"steps": 20}, _records(v), "val_loss") for lab, v in values.items()}


def test_aggregate_mean_sample_std_per_seed_values_and_areas():
    out = aggregate("batch", {"steps": 20}, _records([0.5, 0.7, 0.9]), "val_loss")
    assert out.values == [0.5, 0.7, 0.9] and out.seeds == [0, 1, 2] and out.n == 3
    assert out.mean == pytest.approx(0.7) and out.std == pytest.approx(statistics.stdev([0.5, 0.7, 0.9]))
    assert out.aucs == pytest.approx([(2.0 + v) / 2 for v in (0.5, 0.7, 0.9)]) and out.wall_time == 3.0


def test_aggregate_leaves_diverged_seeds_out_of_the_mean_and_says_so():
    out = aggregate("batch", {"steps": 20}, _records([0.4, None, 0.6]), "val_loss")
    assert out.mean == pytest.approx(0.5) and out.n == 2
    assert out.statuses == ["completed", "diverged", "completed"]


def test_curve_summary_mean_band_and_trapezoid_area():
    curves = [[(25, 2.0), (50, 1.0), (100, 0.5)], [(25, 4.0), (50, 1.0), (100, 0.7)]]
    out = curve_summary(curves, steps=100)
    assert out.steps == [25, 50, 100] and out.mean == pytest.approx([3.0, 1.0, 0.6])
    assert out.std == pytest.approx([statistics.stdev([2.0, 4.0]), 0.0, statistics.stdev([0.5, 0.7])])
    assert [(a.step, a.value) for a in out.at] == [(25, 3.0), (50, 1.0), (100, pytest.approx(0.6))]
    assert out.auc == pytest.approx((25 * (3.0 + 1.0) / 2 + 50 * (1.0 + 0.6) / 2) / 75)
    assert curve_summary([[(50, 1.0), (100, 0.8)]], steps=100).at[0].model_dump() == {
        "fraction": 0.25,
        "step": None,
        "value": None,
    }
    assert curve_area([(10, float("nan")), (20, 1.0)]) == 1.0


def test_better_reports_the_paired_difference_its_standard_error_and_the_rule():
    arms = _arms(layer=[0.3, 0.5, 0.2], batch=[0.6, 0.4, 0.9])
    c = judge(("better", "layer", "batch"), arms, "val_loss")
    diffs = [-0.3, 0.1, -0.7]
    assert c.per_seed == pytest.approx(diffs) and c.difference == pytest.approx(statistics.fmean(diffs))
    assert c.se == pytest.approx(statistics.stdev(diffs) / math.sqrt(3)) and c.n == 3
    # -0.3 mean but SE 0.23: inside t(0.95, 2) = 2.919986 standard errors; seed 1 goes the other way
    assert not c.holds and not c.all_seeds and "standard errors" in c.rule
    clear = _arms(layer=[0.3, 0.35, 0.2], batch=[0.6, 0.62, 0.55])
    c = judge(("better", "layer", "batch"), clear, "val_loss")
    assert c.holds and c.all_seeds and c.t == pytest.approx(2.919986, abs=1e-6)
    assert c.interval == pytest.approx([c.difference - 2.919986 * c.se, c.difference + 2.919986 * c.se])
    assert not judge(("better", "layer", "batch"), clear, "accuracy").holds  # higher is better there


def test_close_is_an_equivalence_margin_not_a_quarter_of_the_value():
    rule = ("close", "layer", "batch")
    near = _arms(layer=[0.100, 0.111, 0.121], batch=[0.101, 0.110, 0.120])
    c = judge(rule, near, "val_loss")
    assert c.holds and c.all_seeds and c.margin == pytest.approx(EQUIV_REL * 0.110333, rel=1e-4)
    # BN 12 % better on every seed (the MNIST-1D case): the old 25 % rule said "≈"; this one does not
    apart = _arms(layer=[1.12, 1.01, 0.90], batch=[1.0, 0.9, 0.8])
    c = judge(rule, apart, "val_loss")
    assert not c.holds and not c.all_seeds


def test_faster_compares_per_seed_curve_areas():
    arms = {
        "layer": aggregate(
            "layer", {"steps": 20}, _records([0.5, 0.5], [[(10, 1.0), (20, 0.5)]] * 2), "val_loss"
        ),
        "none": aggregate(
            "none",
            {"steps": 20},
            _records([0.5, 0.5], [[(10, 2.0), (20, 0.5)], [(10, 2.2), (20, 0.5)]]),
            "val_loss",
        ),
    }
    c = judge(("faster", "layer", "none"), arms, "val_loss")
    assert c.per_seed == pytest.approx([-0.5, -0.6]) and c.holds and c.all_seeds
    assert not judge(("better", "layer", "none"), arms, "val_loss").holds  # same final values


def test_gap_best_trains_and_refused():
    arms = _arms(
        **{
            "layer g=1.0": [0.5, 0.6, 0.55],
            "layer g=0.1": [0.55, 0.62, 0.6],
            "batch g=1.0": [0.5, 0.6, 0.5],
            "batch g=0.1": [1.2, 1.1, 1.3],
        }
    )
    c = judge(PRESETS["gain-init"].claims[0], arms, "val_loss")
    assert c.holds and c.all_seeds and c.per_seed == pytest.approx([0.05 - 0.7, 0.02 - 0.5, 0.05 - 0.8])
    arms = _arms(none=[0.25, 0.25, 0.25], layer=[0.1, 0.3, 0.1], batch=[0.22, 0.26, 0.2])
    c = judge(("best", "layer"), arms, "val_loss")
    assert not c.holds and not c.all_seeds and len(c.versus) == 2
    c = judge(("trains", "layer"), _arms(layer=[1.0, 2.5]), "val_loss", chance=math.log(10))
    assert not c.all_seeds  # 2.5 is above ln 10 ≈ 2.303
    online = PRESETS["online"]
    out = judge_all(
        list(online.claims), _arms(none=[2.0, 2.1, 2.0], layer=[0.5, 0.6, 0.55]), "val_loss", online.runs[0]
    )
    refused = next(c for c in out.claims if c.kind == "refused")
    assert refused.holds and "batch size" in refused.message
    assert out.holds and out.all_seeds


def test_trace_stats_leave_out_the_start_up_steps_and_count_gradient_orders():
    norms = [0.01 * (t + 1) for t in range(START)] + [1.0, 2.0, 1.5]
    grads = [1e-12] + [1e-6] * (len(norms) - 2) + [1.0]
    out = trace_stats({"hidden": {"hidden_norms": norms, "grad_norms": grads}})
    assert out["hidden_spread"] == pytest.approx(2.0 / 0.01) and out["hidden_spread_late"] == pytest.approx(
        2.0
    )
    assert out["grad_orders"] == pytest.approx(12.0)
    strided = {"hidden_norms": [0.1, 1.0, 2.0], "time_index": [0, 30, 60], "grad_norms": [0.0, 1.0, 1.0]}
    out = trace_stats({"hidden": strided})
    assert out["hidden_spread_late"] == pytest.approx(2.0) and out["grad_orders"] == pytest.approx(
        45.0, abs=0.2
    )
    assert set(trace_stats(None).values()) == {None}
    assert {"hidden_spread", "hidden_spread_late", "grad_orders"} <= set(trace_stats(None))


def test_steadier_and_gradient_claims_pair_seeds():
    def arm(spreads, orders):
        recs = _records([0.2] * len(spreads))
        for r, s, o in zip(recs, spreads, orders, strict=True):
            r["traces"] = {"hidden_spread": s, "hidden_spread_late": s, "grad_orders": o}
        return aggregate("x", {"steps": 20}, recs, "val_loss")

    arms = {
        "none": arm([4.0, 1.1, 3.0], [14.0, 13.0, 15.0]),
        "layer": arm([1.2, 1.3, 1.1], [4.0, 4.5, 3.5]),
    }
    c = judge(("steadier", "layer", "none"), arms, "val_loss")
    assert not c.all_seeds and c.per_seed == pytest.approx([-2.8, 0.2, -1.9])
    c = judge(("gradient", "layer", "none"), arms, "val_loss")
    assert c.holds and c.all_seeds and c.difference == pytest.approx(-10.0)


def test_every_preset_has_claims_naming_its_own_runs_and_states_its_setup():
    for name, preset in PRESETS.items():
        assert preset.claims and preset.setup and len(preset.seeds) >= 5, name
        for rule in preset.claims:
            if rule[0] != "refused":
                assert set(rule[1:]) <= set(preset.run_labels()), (name, rule)


def test_metric_key():
    assert metric_key("val_loss") == "val_loss" and metric_key("accuracy") == "val_accuracy"


def test_a_claim_with_too_few_paired_seeds_is_pending_never_held_or_failed():
    base = PRESETS["fig6-batch4"].runs[0]
    # the case: every batch seed ended before any layer seed, so no pair is in yet
    none_paired = {
        "layer": aggregate("layer", {"steps": 20}, [], "val_loss"),
        "batch": aggregate("batch", {"steps": 20}, _records([0.6, 0.7, 0.8, 0.7, 0.6]), "val_loss"),
    }
    out = judge_all([("better", "layer", "batch")], none_paired, "val_loss", base, expected=5)
    c = out.claims[0]
    assert c.pending and c.holds is None and c.seeds_in == 0 and c.seeds_expected == 5
    assert out.pending and out.holds is None
    # one seed with a large effect: a sign, not a verdict (a standard error needs two differences)
    one = _arms(layer=[0.2], batch=[0.9])
    c = judge_all([("better", "layer", "batch")], one, "val_loss", base, expected=5).claims[0]
    assert c.pending and c.holds is None and c.difference == pytest.approx(-0.7)
    # every seed that will come is in, but only one: still no verdict, never "holds"
    c = judge_all([("better", "layer", "batch")], one, "val_loss", base, expected=1).claims[0]
    assert c.pending and c.holds is None
    # 3 of 5 in, not beyond the t bound: pending (seeds to come); all 5 in, same differences: it fails
    mixed = [0.3, 0.5, 0.2]
    c = judge_all(
        [("better", "layer", "batch")],
        _arms(layer=mixed, batch=[0.6, 0.4, 0.9]),
        "val_loss",
        base,
        expected=5,
    ).claims[0]
    assert c.pending and c.holds is None and c.seeds_in == 3
    c = judge_all(
        [("better", "layer", "batch")],
        _arms(layer=mixed, batch=[0.6, 0.4, 0.9]),
        "val_loss",
        base,
        expected=3,
    ).claims[0]
    assert not c.pending and c.holds is False
    # a clear effect on 3 of 5 is still pending (no verdict before the planned seeds), with its running
    # estimate and interval; "refused" never waits for seeds
    clear = _arms(layer=[0.3, 0.35, 0.2], batch=[0.6, 0.62, 0.55])
    out = judge_all(
        [("better", "layer", "batch"), ("refused", "batch")],
        clear,
        "val_loss",
        base.model_copy(update={"batch_size": 1, "norm": "layer"}),
        expected=5,
    )
    held, refused = out.claims
    assert held.holds is None and held.pending and (held.seeds_in, held.seeds_expected) == (3, 5)
    assert held.interval is not None and held.interval[1] < 0  # the estimate is shown, not judged
    assert held.companion is not None and held.companion.holds is None
    assert refused.seeds_in is None and not refused.pending


def test_chance_is_an_equivalence_with_a_uniform_guess():
    chance = math.log(10)
    at_chance = [chance + 0.01, chance - 0.02, chance + 0.005]
    c = judge(("chance", "post-LN"), _arms(**{"post-LN": at_chance}), "val_loss", chance=chance)
    diffs = [v - chance for v in at_chance]
    se = statistics.stdev(diffs) / math.sqrt(3)
    assert c.per_seed == pytest.approx(diffs) and c.se == pytest.approx(se)
    assert c.margin == pytest.approx(EQUIV_REL * chance) and c.holds and c.all_seeds
    learned = judge(("chance", "pre-LN"), _arms(**{"pre-LN": [0.01, 0.02, 2.3]}), "val_loss", chance=chance)
    assert not learned.holds and not learned.all_seeds
    preset = PRESETS["transformer-ln-position"]
    out = judge_all(
        list(preset.claims),
        _arms(**{"pre-LN": [0.01, 0.002, 0.03], "post-LN": at_chance}),
        "val_loss",
        preset.runs[0],
    )
    assert [c.kind for c in out.claims] == ["better", "trains", "chance"] and out.holds


def _series_probes(elrs, angles, etas=None):
    """A run's probe summary with one scale-invariant set per column of `elrs` / `angles`."""
    series = []
    for i, (elr, ang) in enumerate(zip(elrs, angles, strict=True)):
        series.append(
            {
                "step": 10 * (i + 1),
                "eta_hessian_lambda_max": None if etas is None else etas[i],
                "groups": [
                    {"name": f"g{k}", "effective_lr": e, "angular_update": a}
                    for k, (e, a) in enumerate(zip(elr, ang, strict=True))
                ],
            }
        )
    return {"fisher_series": series}


def test_series_stats_read_the_first_and_last_estimates_and_the_second_half():
    probes = _series_probes(
        elrs=[(1e-3, 2e-3), (5e-4, 1e-3), (2e-4, 1e-3), (1e-4, 4e-4)],
        angles=[(0.5, 0.7), (0.1, 0.3), (0.02, 0.04), (0.03, 0.05)],
        etas=[0.5, 1.5, 2.2, None],
    )
    out = trace_stats(probes)
    assert out["elr_orders"] == pytest.approx((math.log10(1e-4 / 1e-3) + math.log10(4e-4 / 2e-3)) / 2)
    assert out["angular_late"] == pytest.approx(((0.02 + 0.04) / 2 + (0.03 + 0.05) / 2) / 2)
    assert out["eta_lambda_first"] == 0.5 and out["eta_lambda_late"] == pytest.approx((1.5 + 2.2) / 2)
    empty = trace_stats({})
    assert empty["elr_orders"] is None and empty["eta_lambda_late"] is None


def _series_cells(spec, per_label):
    """Arms whose records carry probe summaries: {label: [probes per seed]}."""
    out = {}
    for label, probes in per_label.items():
        records = [
            {"seed": s, "status": "completed", "value": 0.1, "curve": [(10, 0.1)], "probes": p}
            for s, p in enumerate(probes)
        ]
        out[label] = aggregate(label, spec, records, "val_loss")
    return out


def test_decays_equilibrium_and_edge_claims_against_their_lines():
    spec = {"steps": 40, "lr": 0.1, "weight_decay": 0.01, "momentum": 0.9}
    line = math.sqrt(2 * 0.1 * 0.01 / 1.9)
    near = [1.1, 0.95, 1.05]  # the late angle ÷ the line, per seed
    arms = _series_cells(
        spec,
        {
            "wd": [_series_probes([(1e-3,), (2e-3,)], [(0.1,), (r * line,)]) for r in near],
            "none": [_series_probes([(1e-3,), (f * 1e-3,)], [(0.1,), (0.001,)]) for f in (0.5, 0.4, 0.6)],
        },
    )
    eq = judge(("equilibrium", "wd"), arms, "val_loss")
    se = statistics.stdev([r - 1 for r in near]) / math.sqrt(3)
    assert eq.per_seed == pytest.approx([r - 1 for r in near]) and eq.se == pytest.approx(se)
    assert eq.holds and eq.all_seeds and eq.line == pytest.approx(line)
    off = judge(("equilibrium", "none"), arms, "val_loss")
    assert not off.holds and not off.all_seeds  # 0.001 rad is far below the line
    decays = judge(("decays", "none"), arms, "val_loss")
    assert decays.per_seed == pytest.approx([math.log10(f) for f in (0.5, 0.4, 0.6)]) and decays.holds
    assert not judge(("decays", "wd"), arms, "val_loss").holds  # it doubled
    sharp = _series_cells(
        {"steps": 40, "lr": 0.02},
        {"gd": [_series_probes([(1.0,)] * 4, [(0.1,)] * 4, etas=[0.4, 1.0, e, e]) for e in (1.9, 2.05, 2.1)]},
    )
    edge = judge(("edge", "gd"), sharp, "val_loss")
    assert edge.per_seed == pytest.approx([1.9 / 2 - 1, 2.05 / 2 - 1, 2.1 / 2 - 1]) and edge.holds


def test_edge_is_a_tighter_margin_than_the_equilibrium_line():
    # η·λ_max 1.6 is within the angular line's ±25 % but not at the edge's ±10 %
    low = _series_cells(
        {"steps": 40, "lr": 0.02},
        {"gd": [_series_probes([(1.0,)] * 2, [(0.1,)] * 2, etas=[0.4, e]) for e in (1.6, 1.62, 1.58)]},
    )
    edge = judge(("edge", "gd"), low, "val_loss")
    assert edge.margin == pytest.approx(0.10) and not edge.holds and not edge.all_seeds


def test_series_stats_read_summaries_stored_with_either_key_for_the_weight_sets():
    """A run's fisher_series entries name their weight sets "weight_sets" (before: "groups")."""
    old = _series_probes(elrs=[(1e-3, 2e-3), (1e-4, 4e-4)], angles=[(0.5, 0.7), (0.03, 0.05)], etas=None)
    new = {
        "fisher_series": [
            {("weight_sets" if k == "groups" else k): v for k, v in e.items()} for e in old["fisher_series"]
        ]
    }
    assert "groups" in old["fisher_series"][0] and "weight_sets" in new["fisher_series"][0]
    assert trace_stats(new) == trace_stats(old)
    assert trace_stats(new)["elr_orders"] == pytest.approx(
        (math.log10(1e-4 / 1e-3) + math.log10(4e-4 / 2e-3)) / 2
    )


def test_the_t_rule_uses_the_quantile_for_the_n_in_hand():
    # d = −1, −2, −3, −4, −5 ÷ 10: mean −0.3, sd 0.158114, SE 0.0707107; t(0.95, 4) = 2.131847 (table)
    arms = _arms(layer=[0.0, 0.0, 0.0, 0.0, 0.0], batch=[0.1, 0.2, 0.3, 0.4, 0.5])
    c = judge(("better", "layer", "batch"), arms, "val_loss")
    assert c.t == pytest.approx(2.131847, abs=1e-6) and c.se == pytest.approx(0.0707107, abs=1e-7)
    assert c.interval == pytest.approx([-0.3 - 2.131847 * 0.0707107, -0.3 + 2.131847 * 0.0707107], abs=1e-6)
    # a mean 2.05 SE from 0 clears Z = 2 but not t(0.95, 4) = 2.13: the old rule's false verdict
    d = [-0.1, -0.2, -0.3, 0.05, -0.1]  # mean −0.13, SE 0.0583 → 2.23 SE: holds
    c = judge(("better", "layer", "batch"), _arms(layer=d, batch=[0.0] * 5), "val_loss")
    assert c.holds is True
    d = [-0.1, -0.2, -0.3, 0.1, -0.1]  # mean −0.12, SE 0.0663 → 1.81 SE: does not
    c = judge(("better", "layer", "batch"), _arms(layer=d, batch=[0.0] * 5), "val_loss")
    assert c.holds is False and c.interval[1] > 0


def test_the_sign_companion_ranks_a_diverged_arm_worst_and_says_how_many():
    # fig6-batch4 on fresh seeds: LN lower on every seed, but one BN seed blew up (heavy tail) and one
    # diverged outright: the t rule (which decides) fails, the sign test holds on 5 of 5
    arms = _arms(layer=[0.30, 0.32, 0.28, 0.31, 0.29], batch=[0.40, 0.45, 2.85, None, 0.38])
    c = judge(("better", "layer", "batch"), arms, "val_loss")
    assert c.holds is False and c.n == 4  # the diverged seed leaves the mean
    comp = c.companion
    assert (comp.wins, comp.n, comp.diverged) == (5, 5, 1) and comp.p == pytest.approx(1 / 32)
    assert comp.holds is True and comp.text.startswith("layer lower on 5 of 5 seeds (sign test p = 0.0312)")
    assert "1 seed with a diverged or failed run" in comp.text and "decides" in (c.decides or "")
    # the other way round: LN's own diverged seed counts against it
    arms = _arms(layer=[0.30, 0.32, 0.28, 0.31, None], batch=[0.40, 0.45, 0.5, 0.38, 0.4])
    comp = judge(("better", "layer", "batch"), arms, "val_loss").companion
    assert (comp.wins, comp.n, comp.diverged) == (4, 5, 1) and comp.p == pytest.approx(6 / 32)
    assert comp.holds is False


def test_equivalence_is_tost_and_its_companion_counts_seeds_inside_the_margin():
    base = {"layer": [0.50, 0.51, 0.49, 0.50, 0.52], "batch": [0.50, 0.50, 0.50, 0.50, 0.50]}
    c = judge(("close", "layer", "batch"), _arms(**base), "val_loss")
    # d = 0, .01, −.01, 0, .02: mean .004, SE .00510; |d̄| + t(0.95,4)·SE = .01487 ≤ margin .05
    assert c.holds is True and c.margin == pytest.approx(0.05)
    assert c.interval[1] == pytest.approx(0.004 + 2.131847 * 0.0050990, abs=1e-6)
    assert (c.companion.wins, c.companion.n) == (5, 5) and c.companion.holds is True


def _live(layer, batch, planned):
    """Re-judge one group as each of its seeds lands: the claim after 1, 2, …, planned seeds."""
    base = PRESETS["fig6-batch4"].runs[0]
    return [
        judge_all(
            [("better", "layer", "batch")],
            _arms(layer=layer[:k], batch=batch[:k]),
            "val_loss",
            base,
            expected=planned,
            preset="fig6-batch4",
        )
        for k in range(1, planned + 1)
    ]


def test_a_live_group_shows_no_verdict_until_its_planned_seeds_are_in():
    # the online preset's case: two seeds agree at once; the old rule said "holds" at 2 of 5
    layer, batch = [0.30, 0.31, 0.5, 0.29, 0.6], [0.50, 0.52, 0.45, 0.51, 0.55]
    seen = _live(layer, batch, 5)
    for k, verdict in enumerate(seen[:-1], start=1):
        c = verdict.claims[0]
        assert verdict.holds is None and c.holds is None and c.all_seeds is None and c.pending
        assert (c.seeds_in, c.seeds_expected) == (k, 5) and c.companion.holds is None
        if k >= 2:  # the running estimate and its interval are there all along
            assert c.interval is not None and c.difference is not None
    final = seen[-1].claims[0]
    assert not final.pending and final.holds is False and seen[-1].holds is False
    assert final.declared == "2d54ec1" and final.exploratory is False


def test_under_no_effect_the_share_of_groups_ever_showing_holds_stays_within_alpha():
    # 1,000 groups of 5 planned seeds, paired differences N(0, 1): re-judged as each seed lands
    rng = random.Random(20261207)
    groups, ever = 1000, 0
    for _ in range(groups):
        layer = [rng.gauss(0.0, 1.0) for _ in range(5)]
        seen = _live(layer, [0.0] * 5, 5)
        ever += any(v.holds is True for v in seen)
    alpha = 0.05
    mc = 3 * math.sqrt(alpha * (1 - alpha) / groups)  # three Monte Carlo standard errors
    assert ever / groups <= alpha + mc
    assert ever > 0  # the rule can hold: one-sided 5 % leaves ≈ 50 of 1,000
