"""Smoothing and hover of the curves panels (frontend/smoothing.py), and the Compare / Runs callbacks
that use them, without a browser."""

from __future__ import annotations

import math

import pytest
from dash import no_update

from frontend import figures, smoothing, smoothing_control


def _run(rid, norm="layer"):
    return {
        "id": rid,
        "status": "running",
        "spec": {"task": "digits", "norm": norm, "batch_size": 32, "seed": 0},
    }


def _series(steps, values):
    return {"step": steps, "value": values, "min": values, "max": values, "time": [0.0] * len(steps)}


def test_ema_is_the_debiased_exponential_moving_average_in_float64():
    values = [2.0, float("nan"), 0.5, None, 4.0, 1.0, 3.0]
    w = 0.6
    out, (acc, n) = smoothing.ema(values, w)
    # the definition: acc_k = w acc_{k-1} + (1-w) v_k, output acc_k / (1 - w^k), over the finite values
    finite = [2.0, 0.5, 4.0, 1.0, 3.0]
    expect = [
        sum((1 - w) * w ** (k - i) * finite[i] for i in range(k + 1)) / (1 - w ** (k + 1))
        for k in range(len(finite))
    ]
    got = [v for v in out if v is not None and not math.isnan(v)]
    assert got == pytest.approx(expect, rel=1e-14, abs=0)
    assert math.isnan(out[1]) and out[3] is None  # missing points pass through, uncounted
    assert n == 5 and acc == pytest.approx(sum((1 - w) * w ** (4 - i) * finite[i] for i in range(5)))
    assert smoothing.ema([7.0], w)[0] == [7.0]  # debiased: the first point is the point itself
    # continuing from the state equals smoothing in one go (what the browser does with live points)
    head, state = smoothing.ema(values[:4], w)
    tail, _ = smoothing.ema(values[4:], w, state)
    assert head[0] == out[0] and head[2] == out[2] and tail == pytest.approx(out[4:], rel=1e-15)


def test_elapsed_is_formatted_for_people_and_weights_are_clamped():
    assert [smoothing.format_elapsed(s) for s in (0.8437, 12.34, 125.4, 3725.0, None, float("inf"))] == [
        "0.84 s",
        "12.3 s",
        "2 min 05 s",
        "1 h 02 min",
        "–",
        "–",
    ]
    assert [smoothing.parse_weight(v) for v in ("0.6", 2, -1, "x", None, float("nan"))] == [
        0.6,
        0.99,
        0.0,
        0.0,
        0.0,
        0.0,
    ]


def test_smoothed_curve_draws_the_raw_series_faint_underneath_and_hovers_with_step_and_wall_time():
    hist = {
        "series": {
            "train_loss": _series([10, 20, 30], [3.0, 1.0, 2.0]),
            "elapsed": _series([10, 30], [1.0, 65.0]),
        }
    }
    fig, tmap = figures.curves_figure([_run("a")], {"a": hist}, panels=["loss"], smoothing=0.5)
    (entry,) = tmap["runs"]["a"]
    raw, line = fig["data"][entry["raw"]], fig["data"][entry["i"]]
    assert raw["meta"] == "a:raw" and raw["opacity"] < 0.5 and list(raw["y"]) == [3.0, 1.0, 2.0]
    assert list(line["y"]) == pytest.approx(smoothing.ema([3.0, 1.0, 2.0], 0.5)[0])
    assert entry["raw"] < entry["i"]  # drawn first: underneath
    assert [list(c) for c in line["customdata"]] == [
        [10, "1.00 s", 3.0],
        [20, "33.0 s", 1.0],
        [30, "1 min 05 s", 2.0],
    ]
    for part in (
        "%{fullData.name}",
        "step %{customdata[0]}",
        "train loss %{y:.4g}",
        "raw %{customdata[2]",
        "wall time %{customdata[1]}",
    ):
        assert part in line["hovertemplate"]
    assert (tmap["color"], tmap["panels"], tmap["smooth"]) == ("norm", ["loss"], 0.5)
    fig, tmap = figures.curves_figure([_run("a")], {"a": hist}, panels=["loss"], smoothing=0.0)
    assert len(fig["data"]) == 1 and tmap["runs"]["a"][0]["raw"] is None  # raw only: one trace
    assert "raw" not in fig["data"][0]["hovertemplate"]


def test_the_smoothing_control_redraws_only_when_the_weight_changed(monkeypatch):
    from frontend import data

    calls = []
    monkeypatch.setattr(
        data,
        "curves_bundle",
        lambda ids, **kw: calls.append((ids, kw)) or {"figure": "F", "map": "M", "watch": "W"},
    )
    tmap = {
        "runs": {"r1": [], "r2": []},
        "smooth": 0.6,
        "x": "time",
        "color": "norm",
        "panels": ["loss"],
        "from_start": True,
    }
    assert smoothing_control.rebuild(0.6, tmap, False) == (no_update,) * 3
    assert smoothing_control.rebuild(0.9, None, False) == (no_update,) * 3  # no curves on the page
    assert smoothing_control.rebuild(0.9, tmap, True) == ("F", "M", "W")
    ((ids, kw),) = calls
    assert ids == ["r1", "r2"] and kw == {
        "smoothing": 0.9,
        "x_mode": "time",
        "color_by": "norm",
        "panels": ["loss"],
        "present": True,
        "from_start": True,
    }


class _Client:
    def __init__(self, items):
        self.items = items

    def runs(self, **_):
        return {"items": self.items}


def test_compare_run_picker_labels_follow_the_runs_status():
    from frontend.app import create_app

    create_app()
    from frontend.pages import compare

    opened = [dict(_run("aaaaaaaa1"), status="running")]  # as the page saw it when it opened
    now = [dict(_run("aaaaaaaa1"), status="completed"), dict(_run("bbbbbbbb2", "batch"), status="queued")]
    options = compare.run_options(_Client(now), opened)
    assert [o["value"] for o in options] == ["aaaaaaaa1", "bbbbbbbb2"]
    assert "· completed ·" in options[0]["label"] and "· queued ·" in options[1]["label"]
    live = compare.run_options(_Client(now), opened, {"bbbbbbbb2": "running"})  # the stream is fresher
    assert "· running ·" in live[1]["label"]


def test_runs_columns_are_numeric_and_metric_columns_appear_with_their_metric():
    from frontend.app import create_app

    create_app()
    from frontend.pages import runs

    cols = {c["id"]: c for c in runs.columns([{"accuracy": 0.9, "bpc": None}])}
    assert "accuracy" in cols and "bpc" not in cols and "mse" not in cols
    for c in ("val_loss", "accuracy", "steps_per_s", "wall_time", "batch_size"):
        assert cols[c]["type"] == "numeric"
    assert "result" not in cols and cols["link"]["presentation"] == "markdown"
