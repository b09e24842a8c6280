"""A preset card draws the quantity its claims judge (frontend/judged_figure.py, the Presets page): the
group is built as the API builds it (normlab.arms.aggregate, normlab.claims.judge_all) from seed records
with known hidden-state figures, and the figure's numbers are checked against their definitions."""

from __future__ import annotations

import math
import statistics

import pytest

from frontend import judged_figure
from normlab.arms import aggregate
from normlab.claim_kinds import KINDS, QUANTITY
from normlab.claims import judge_all
from normlab.presets import PRESETS
from normlab.stats import t_quantile
from normlab_client.group_models import GroupPublic

ETA_LAMBDA = {"none η=2": [1.9, 2.05, 2.0, 1.95, 2.1], "layer η=0.25": [1.7, 1.8, 2.2, 1.9, 2.0]}


def _group(preset_name: str, traces: dict[str, dict[str, list[float | None]]]) -> GroupPublic:
    """The group of a finished launch of the preset, each seed's traces as given ({key: {label: values}})."""
    preset = PRESETS[preset_name]
    seeds = list(preset.seeds)
    arms = {}
    for label, spec in zip(preset.run_labels(), preset.runs, strict=True):
        records = [
            {
                "seed": s,
                "value": 0.5,
                "status": "completed",
                "curve": [(10, 1.0), (20, 0.5)],
                "traces": {key: per_label[label][i] for key, per_label in traces.items()},
            }
            for i, s in enumerate(seeds)
        ]
        arms[label] = aggregate(label, spec.model_dump(mode="json"), records, preset.metric)
    verdict = judge_all([list(c) for c in preset.claims], arms, preset.metric, preset.runs[0], len(seeds))
    return GroupPublic.model_validate(
        {
            "group_id": "g1",
            "kind": "preset",
            "preset": preset_name,
            "metric": preset.metric,
            "higher_is_better": False,
            "counts": {"completed": len(seeds) * len(arms)},
            "done": True,
            "runs": [],
            "arms": [a.public().model_dump() for a in arms.values()],
            "claims": [c.model_dump() for c in verdict.claims],
        }
    )


def _traces(fig: dict, meta: str) -> list[dict]:
    return [t for t in fig["data"] if t.get("meta") == meta]


def test_every_claim_kind_but_a_spec_check_names_the_quantity_it_judges():
    assert set(QUANTITY) == set(KINDS) - {"refused"}


def test_edge_of_stability_draws_eta_lambda_per_arm_never_the_mse_bands():
    group = _group("edge-of-stability", {"eta_lambda_late": ETA_LAMBDA})
    assert judged_figure.trace_keys(group) == ["eta_lambda_late"]
    assert not judged_figure.draws_bands(group)  # its claims judge η·λ_max, not the MSE
    fig = judged_figure.judged_figure(group, "eta_lambda_late")
    assert "η·λ_max" in fig["layout"]["yaxis"]["title"]["text"]
    for label, values in ETA_LAMBDA.items():
        (seeds,) = _traces(fig, f"{label}:seeds")
        assert seeds["y"] == values
        (mean,) = _traces(fig, f"{label}:mean")
        assert mean["y"][0] == pytest.approx(statistics.fmean(values))
        # the bar is the claims' interval half-width t(0.95, n−1)·sd/√n, not ± 0
        half = t_quantile(0.95, 4) * statistics.stdev(values) / math.sqrt(5)
        assert mean["error_y"]["array"][0] == pytest.approx(half) and half > 0.05
    # the edge at 2 over each arm, with the claim's ±10 % margin shaded
    lines = [s for s in fig["layout"]["shapes"] if s["type"] == "line"]
    rects = [s for s in fig["layout"]["shapes"] if s["type"] == "rect"]
    assert [s["y0"] for s in lines] == [2.0, 2.0]
    assert [(r["y0"], r["y1"]) for r in rects] == [pytest.approx((1.8, 2.2))] * 2


def test_wd_effective_lr_draws_the_angular_update_at_its_equilibrium_line_and_the_elr_decay():
    angular = {"no WD": [0.01, 0.012, 0.011, 0.009, 0.01], "WD 0.01": [0.03, 0.033, 0.031, 0.034, 0.029]}
    orders = {"no WD": [-0.5, -0.6, -0.4, -0.55, -0.5], "WD 0.01": [-0.1, 0.0, -0.05, 0.02, -0.02]}
    group = _group("wd-effective-lr", {"angular_late": angular, "elr_orders": orders})
    keys = judged_figure.trace_keys(group)
    assert set(keys) == {"angular_late", "elr_orders"}
    fig = judged_figure.judged_figure(group, "angular_late")
    assert _traces(fig, "WD 0.01:seeds")[0]["y"] == angular["WD 0.01"]
    # only the arm with weight decay has a line: √(2ηλ/(1+μ)) = √(2·0.1·0.01/1.9)
    (line,) = [s for s in fig["layout"]["shapes"] if s["type"] == "line"]
    assert line["y0"] == pytest.approx(math.sqrt(2 * 0.1 * 0.01 / 1.9))
    assert line["x0"] < 1 < line["x1"]  # over the second arm (WD 0.01), not the first
    decay = judged_figure.judged_figure(group, "elr_orders")
    assert [s["y0"] for s in decay["layout"]["shapes"] if s["type"] == "line"] == [0.0, 0.0]


def test_a_seed_without_the_number_is_left_out_and_an_arm_without_any_draws_no_mean():
    eta = {"none η=2": [2.0, None, 1.9, None, 2.1], "layer η=0.25": [None] * 5}
    group = _group("edge-of-stability", {"eta_lambda_late": eta})
    fig = judged_figure.judged_figure(group, "eta_lambda_late")
    assert _traces(fig, "none η=2:seeds")[0]["y"] == [2.0, 1.9, 2.1]
    assert _traces(fig, "layer η=0.25:mean") == []


def test_no_number_yet_says_so_instead_of_bare_axes():
    group = _group("edge-of-stability", {"eta_lambda_late": {k: [None] * 5 for k in ETA_LAMBDA}})
    fig = judged_figure.judged_figure(group, "eta_lambda_late")
    texts = [a["text"] for a in fig["layout"].get("annotations", [])]
    assert any("No finished seed" in t for t in texts)


def test_a_preset_judged_on_its_final_metric_keeps_its_bands():
    group = _group("transformer-ln-position", {})  # better, trains, chance: all on the final loss
    assert judged_figure.draws_bands(group) and judged_figure.trace_keys(group) == []
    group.claims = []  # no claim: the bands too
    assert judged_figure.draws_bands(group)


def test_the_card_draws_the_judged_figure_for_edge_of_stability():
    from frontend.app import create_app

    create_app()
    from frontend.pages import presets

    group = _group("edge-of-stability", {"eta_lambda_late": ETA_LAMBDA})
    graphs = presets.judged_graphs(group)
    assert [g.className for g in graphs] == ["preset-judged judged-eta_lambda_late"]


def test_compares_group_card_draws_the_judged_figure_beside_its_bands():
    from frontend import group_view, ids

    group = _group("edge-of-stability", {"eta_lambda_late": ETA_LAMBDA})
    card = group_view.group_card(group, ids.GROUP_IDS, present=True)
    classes = [getattr(c, "className", None) for c in card]
    assert "graph" in classes and "preset-judged judged-eta_lambda_late" in classes
    judged = card[classes.index("preset-judged judged-eta_lambda_late")]
    # presentation mode: the figure's own height, large type
    assert judged.style == {"height": f"{judged.figure['layout']['height']}px"}
    assert judged.figure["layout"]["font"]["size"] == 20


def test_the_cards_charts_are_sized_for_a_projector_in_presentation_mode():
    from frontend.app import create_app

    create_app()
    from frontend.pages import presets

    group = _group("edge-of-stability", {"eta_lambda_late": ETA_LAMBDA})
    (normal,) = presets.judged_graphs(group)
    (present,) = presets.judged_graphs(group, present=True)
    assert present.figure["layout"]["font"]["size"] == 20 != normal.figure["layout"]["font"]["size"]
    assert present.style == {"height": f"{present.figure['layout']['height']}px"}
    group.claims = []  # no claim: the bands, at the height their figure has
    bands = presets.judged_graphs(group, present=True)[0]
    assert bands.figure["layout"]["font"]["size"] == 20
    assert bands.style == {"height": f"{bands.figure['layout']['height']}px"}
