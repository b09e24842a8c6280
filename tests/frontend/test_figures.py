"""Figures from API JSON: EMA continuation, trace maps for live appends, colours."""

from __future__ import annotations

import pytest

from frontend import figures


def _run(rid, norm="layer", bs=32, task="digits", seed=0):
    spec = {"task": task, "norm": norm, "batch_size": bs, "seed": seed}
    return {"id": rid, "status": "running", "spec": spec}


def _history(steps, loss, val=None, elapsed=None):
    def s(xs, ys):
        return {"step": xs, "value": ys, "min": ys, "max": ys, "time": [0.0] * len(xs)}

    series = {"train_loss": s(steps, loss)}
    if val:
        series["val_loss"] = s(*val)
        series["accuracy"] = s(val[0], [0.5] * len(val[0]))
    if elapsed:
        series["elapsed"] = s(*elapsed)
    return {"series": series}


def test_ema_matches_definition_and_continues_from_its_state():
    values = [1.0, 3.0, None, 2.0, 5.0, 4.0]
    s = 0.7
    full, _ = figures.ema(values, s)
    # the definition, written out: debiased EMA over the non-missing values
    acc, n, expect = 0.0, 0, []
    for v in values:
        if v is None:
            expect.append(None)
            continue
        acc = s * acc + (1 - s) * v
        n += 1
        expect.append(acc / (1 - s**n))
    assert full == pytest.approx(expect)
    head, state = figures.ema(values[:3], s)
    tail, _ = figures.ema(values[3:], s, state)
    assert head + tail == pytest.approx(full)
    assert figures.ema([2.0, 4.0], 0.0)[0] == [2.0, 4.0]


def test_curves_trace_map_points_at_each_series_trace():
    runs = [_run("a", "layer", 4), _run("b", "batch", 128)]
    hist = {"a": _history([1, 2, 3], [3.0, 2.0, 1.0], val=([3], [1.5])), "b": _history([1], [2.0])}
    fig, tmap = figures.curves_figure(runs, hist, panels=["loss", "val", "metric"], smoothing=0.5)
    data = fig["data"]
    for rid in ("a", "b"):
        entries = tmap["runs"][rid]
        assert [e["key"] for e in entries] == ["train_loss", "val_loss", "accuracy"]
        for e in entries:
            assert data[e["i"]]["meta"] == rid
    a_loss = tmap["runs"]["a"][0]
    assert a_loss["last"] == 3 and a_loss["n"] == 3
    smoothed, (acc, n) = figures.ema([3.0, 2.0, 1.0], 0.5)
    assert list(data[a_loss["i"]]["y"]) == pytest.approx(smoothed) and a_loss["acc"] == pytest.approx(acc)
    assert tmap["runs"]["b"][1]["last"] == -1  # no validation yet: any step extends it
    assert fig["layout"]["uirevision"] == "curves-step"


def test_colour_is_fixed_per_normalizer_and_dash_separates_batch_sizes():
    runs = [_run("a", "layer", 4), _run("b", "layer", 128), _run("c", "batch", 4)]
    by_norm = figures.colors_for(runs, "norm")
    assert by_norm["a"][0] == by_norm["b"][0] == figures.NORM_COLORS["layer"]
    assert by_norm["c"][0] == figures.NORM_COLORS["batch"]
    assert by_norm["a"][1] != by_norm["b"][1]
    by_bs = figures.colors_for(runs, "batch_size")
    assert by_bs["a"][0] == by_bs["c"][0] != by_bs["b"][0]
    assert len(set(figures.NORM_COLORS.values())) == len(figures.NORM_COLORS)


def test_wall_time_axis_interpolates_elapsed():
    runs = [_run("a")]
    hist = {"a": _history([10, 20, 30], [1.0, 1.0, 1.0], elapsed=([10, 30], [1.0, 3.0]))}
    fig, tmap = figures.curves_figure(runs, hist, panels=["loss"], x_mode="time")
    assert list(fig["data"][0]["x"]) == pytest.approx([1.0, 2.0, 3.0])
    assert tmap["x"] == "time"


def test_metric_panel_follows_the_task():
    assert figures.metric_key("charlm") == "bpc" and figures.metric_key("digits") == "accuracy"
    assert figures.metric_key("adding") is None  # regression: its metric is the validation loss
    fig, tmap = figures.curves_figure([_run("a", task="adding")], {}, panels=["loss", "val", "metric"])
    assert [e["key"] for e in tmap["runs"]["a"]] == ["train_loss", "val_loss"]
    fig, _ = figures.curves_figure([_run("c", task="charlm")], {})
    assert "bits per character" in str(fig["layout"]["annotations"])


def test_downsampled_history_keeps_its_spikes_as_a_min_max_band():
    hist = _history([10, 20, 30], [1.0, 1.0, 1.0])
    hist["series"]["train_loss"]["max"] = [1.5, 9.0, 1.2]  # a spike inside the second bucket
    hist["series"]["train_loss"]["min"] = [0.8, 0.9, 0.7]
    hist["downsampled"] = True
    fig, tmap = figures.curves_figure([_run("a")], {"a": hist}, panels=["loss"])
    band, line = fig["data"]
    assert band["fill"] == "toself" and max(band["y"]) == 9.0 and min(band["y"]) == 0.7
    assert list(band["x"]) == [10, 20, 30, 30, 20, 10]
    assert tmap["runs"]["a"][0]["i"] == 1 and line["meta"] == "a"  # live points extend the mean line
    hist["downsampled"] = False
    fig, tmap = figures.curves_figure([_run("a")], {"a": hist}, panels=["loss"])
    assert len(fig["data"]) == 1 and tmap["runs"]["a"][0]["i"] == 0


def test_log_ticks_get_sparser_as_the_span_grows():
    narrow = figures.log_ticks([0.12, 0.2])["tickvals"]
    wide = figures.log_ticks([1e-3, 3.0])["tickvals"]
    assert 0.15 not in narrow and any(abs(v - 0.3) < 1e-12 for v in narrow)  # 1-2-3-5 inside a decade
    assert not any(abs(v - 0.002) < 1e-15 for v in wide) and any(abs(v - 0.003) < 1e-15 for v in wide)
    assert figures.log_ticks([])["ticktext"][figures.log_ticks([])["tickvals"].index(1.0)] == "1"


def test_live_runs_without_points_say_they_are_waiting_until_points_exist():
    def waiting(fig):
        return [a for a in fig["layout"].get("annotations", []) if a.get("name") == "waiting"]

    fig, _ = figures.curves_figure([_run("a")], {}, panels=["loss", "val"])
    assert len(waiting(fig)) == 1 and "Waiting" in waiting(fig)[0]["text"]
    fig, _ = figures.curves_figure([_run("a")], {"a": _history([1, 2], [2.0, 1.5])}, panels=["loss"])
    assert waiting(fig) == []
    ended = dict(_run("a"), status="completed")
    fig, _ = figures.curves_figure([ended], {}, panels=["loss"])
    assert waiting(fig) == []  # an ended run without points says so instead


@pytest.mark.parametrize("smoothing", [0.0, 0.6])
@pytest.mark.parametrize("color_by", ["norm", "batch_size"])
def test_a_fork_beside_its_parent_is_dashed_past_the_fork_step_only(smoothing, color_by):
    parent, child, other = _run("p", norm="batch"), _run("c", norm="layer"), _run("o", norm="rms")
    child["spec"]["parent"] = {"id": "p", "step": 30}
    other["spec"]["parent"] = {"id": "elsewhere", "step": 5}  # a fork whose parent is not on this chart
    steps = list(range(1, 61))
    histories = {
        "p": _history(steps, [1.0 / s for s in steps]),
        "c": _history(steps[30:], [0.5 / s for s in steps[30:]]),  # the child's own points: 31 on
        "o": _history(steps, [2.0 / s for s in steps]),
    }
    fig, _ = figures.curves_figure(
        [parent, child, other], histories, panels=["loss"], smoothing=smoothing, color_by=color_by
    )
    traces = {rid: [t for t in fig["data"] if t["legendgroup"] == rid] for rid in "pco"}
    assert all(traces.values()) and len(traces["c"]) == (2 if smoothing else 1)
    assert all(t["line"]["dash"] == "dash" for t in traces["c"])
    assert all(min(t["x"]) == 31 for t in traces["c"])  # the shared prefix is not drawn twice
    for rid in "po":  # the parent, and a run whose parent is not drawn, keep their own line
        assert all(t["line"]["dash"] != "dash" for t in traces[rid])
        assert all(list(t["x"]) == steps for t in traces[rid])
    # the child keeps its normalizer's colour (or its batch size's), like any run
    assert traces["c"][-1]["line"]["color"] == figures.colors_for([child], color_by)["c"][0]


def test_an_empty_loss_axis_waits_over_a_loss_range_and_follows_its_data_from_the_first_point():
    run = {**_run("a"), "spec": {**_run("a")["spec"], "steps": 3000}}
    # nothing yet: both loss panels show 0.01-10 over the planned steps, and the map names their axes
    fig, tmap = figures.curves_figure([run], {}, panels=["loss", "val"])
    lay = fig["layout"]
    for y, x in (("yaxis", "xaxis"), ("yaxis2", "xaxis2")):
        assert lay[y]["type"] == "log"
        assert [10**v for v in lay[y]["range"]] == pytest.approx([0.01, 10.0])
        assert lay[x]["range"] == [0, 3000]
    assert sorted(tmap["waiting_axes"]) == ["xaxis", "xaxis2", "yaxis", "yaxis2"]
    # training points but no evaluation yet: only the validation panel waits
    fig, tmap = figures.curves_figure([run], {"a": _history([1, 2], [2.3, 2.1])}, panels=["loss", "val"])
    assert "range" not in fig["layout"]["yaxis"] and "range" not in fig["layout"]["xaxis"]
    assert sorted(tmap["waiting_axes"]) == ["xaxis2", "yaxis2"]
    # wall time on x: the steps say nothing about seconds, so x keeps plotly's own range
    fig, tmap = figures.curves_figure([run], {}, panels=["loss"], x_mode="time")
    assert "range" not in fig["layout"]["xaxis"] and tmap["waiting_axes"] == ["yaxis"]
    # no runs at all: the figure says so instead (no axes to wait on)
    assert figures.curves_figure([], {}, panels=["loss"])[1]["waiting_axes"] == []


def test_run_labels_tell_pre_from_post_ln_and_weight_standardization_apart():
    # Two Transformer runs that differ only in where the LayerNorm sits, and two conv runs that differ only
    # in Weight Standardization, would otherwise share one legend label.
    pre = {"spec": {"task": "reverse", "norm": "layer", "batch_size": 32, "seed": 0, "ln_position": "pre"}}
    post = {"spec": {**pre["spec"], "ln_position": "post"}}
    gn = {"spec": {"task": "conv-digits", "norm": "group", "batch_size": 2, "seed": 1}}
    ws = {"spec": {**gn["spec"], "weight_standardization": True}}
    labels = [figures.run_label(r) for r in (pre, post, gn, ws)]
    assert len(set(labels)) == 4
    assert "post-LN" in labels[1] and "post-LN" not in labels[0]
    assert labels[3].startswith("group+WS ") and "WS" not in labels[2]
    # the default position is not shown where it does not apply
    digits = {"spec": {"task": "digits", "norm": "layer", "batch_size": 32, "seed": 0, "ln_position": "pre"}}
    assert "LN" not in figures.run_label(digits).replace("layer", "")


def test_runs_alike_in_colour_differ_in_dash_by_whatever_else_differs():
    # the known case: a seq-digits LN run and a digits LN run, same batch size
    seq, flat = _run("s", "layer", 32), _run("d", "layer", 32)
    seq["spec"]["task"] = "seq-digits"
    by_norm = figures.colors_for([seq, flat], "norm")
    assert by_norm["s"][0] == by_norm["d"][0] and by_norm["s"][1] != by_norm["d"][1]
    # learning rates or seeds apart, same task and normalizer
    a, b, c = _run("a", "layer", 32), _run("b", "layer", 32), _run("c", "layer", 32)
    b["spec"]["lr"], c["spec"]["seed"] = 0.01, 7
    assert len({style for style in figures.colors_for([a, b, c], "norm").values()}) == 3


def test_no_two_normalizers_share_a_hue_family_on_a_projector():
    def rgb(hex_: str) -> tuple[int, ...]:
        return tuple(int(hex_[i : i + 2], 16) for i in (1, 3, 5))

    colours = list(figures.NORM_COLORS.values())
    for i, x in enumerate(colours):
        for y in colours[i + 1 :]:  # RGB distance: the old orange GroupNorm sat 67 from BatchNorm
            assert sum((p - q) ** 2 for p, q in zip(rgb(x), rgb(y), strict=True)) ** 0.5 > 70, (x, y)


@pytest.mark.parametrize("present", [False, True])
def test_the_legend_of_many_runs_gets_room_below_the_x_titles_and_the_plot_keeps_its_height(present):
    def layout(n):
        runs = [_run(f"r{i}", norm="layer" if i % 2 else "none", seed=i) for i in range(n)]
        hist = {r["id"]: _history([1, 2], [2.0, 1.0]) for r in runs}
        return figures.curves_figure(runs, hist, panels=["loss", "val"], present=present)[0]["layout"]

    few, many = layout(2), layout(10)
    row_px, per_row, below_px = (32, 2, 78) if present else (22, 3, 58)
    rows = -(-10 // per_row)
    # plotly pushes a legend that overflows the figure up over the x titles: the margin holds every row
    assert many["margin"]["b"] >= below_px + row_px * rows
    plot = many["height"] - many["margin"]["t"] - many["margin"]["b"]
    assert plot == few["height"] - few["margin"]["t"] - few["margin"]["b"]
    # the legend's top stays the same pixels under the plot
    assert many["legend"]["y"] * plot == pytest.approx(-below_px)
