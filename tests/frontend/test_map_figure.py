"""The map figure (frontend/map_figure.py) from JSON shaped as GET /api/groups/{id}'s `map`."""

from __future__ import annotations

import pytest

from frontend.map_figure import map_figure, map_graph
from normlab_client.group_models import GroupPublic, ScaleMapPublic


def _map(claim_side="below"):
    return ScaleMapPublic.model_validate(_map_json(claim_side))


def _map_json(claim_side):
    return {
        "axis": "seq_len",
        "axis_name": "T",
        "values": [16, 64, 256],
        "a": "layer",
        "b": "none",
        "metric": "val_loss",
        "claim_side": claim_side,
        "z": 2.0,
        "points": [
            {"value": 16, "difference": 0.01, "se": 0.02, "n": 5, "per_seed": [], "favours": "neither"},
            {"value": 64, "difference": -0.05, "se": 0.01, "n": 5, "per_seed": [], "favours": "a"},
            {"value": 256, "difference": None, "se": None, "n": 0, "per_seed": [], "favours": None},
        ],
    }


def test_points_with_data_are_drawn_with_z_standard_error_bars():
    fig = map_figure(_map())
    (trace,) = fig["data"]
    assert list(trace["x"]) == ["16", "64"]  # T = 256 has no finished seed yet
    assert list(trace["y"]) == [0.01, -0.05]
    assert list(trace["error_y"]["array"]) == pytest.approx([0.04, 0.02])
    assert list(fig["layout"]["xaxis"]["categoryarray"]) == ["16", "64", "256"]  # room for later points


@pytest.mark.parametrize(("claim_side", "sign"), [("below", -1), ("above", 1)])
def test_the_zero_line_and_the_claims_side_are_drawn(claim_side, sign):
    shapes = map_figure(_map(claim_side))["layout"]["shapes"]
    zero = [s for s in shapes if s["type"] == "line"]
    shade = [s for s in shapes if s["type"] == "rect"]
    assert zero and zero[0]["y0"] == zero[0]["y1"] == 0
    assert shade and shade[0]["y0"] == 0 and sign * shade[0]["y1"] > 0
    bound = max(abs(0.01) + 0.04, abs(-0.05) + 0.02)
    assert abs(shade[0]["y1"]) > bound  # the shade reaches past every bar


def test_the_graph_carries_its_class_for_the_browser():
    assert map_graph(_map()).className == "map-graph"


def test_compares_group_card_draws_the_map_of_a_map_preset():
    from frontend import group_view, ids

    group = {
        "group_id": "g1",
        "kind": "preset",
        "title": "Over T",
        "metric": "val_loss",
        "higher_is_better": False,
        "counts": {"completed": 2},
        "done": False,
        "runs": [],
        "arms": [],
        "claims": None,
        "map": _map_json("below"),
    }
    card = group_view.group_card(GroupPublic.model_validate(group), ids.GROUP_IDS)
    graphs = [c for c in card if getattr(c, "className", None) == "map-graph"]
    assert len(graphs) == 1 and list(graphs[0].figure["data"][0]["y"]) == [0.01, -0.05]
    assert not [
        c
        for c in group_view.group_card(GroupPublic.model_validate({**group, "map": None}), ids.GROUP_IDS)
        if getattr(c, "className", None) == "map-graph"
    ]


def test_presentation_mode_draws_the_map_in_large_type_and_taller():
    normal, present = map_figure(_map())["layout"], map_figure(_map(), present=True)["layout"]
    assert present["font"]["size"] == 20 and normal.get("font", {}).get("size") != 20
    assert present["height"] > normal["height"]
    assert map_graph(_map(), present=True).figure["layout"]["font"]["size"] == 20
