"""Probe figures from a run's events: hidden-state heatmaps, feed-forward layers, Fisher curvature."""

from __future__ import annotations

import math

import pytest

from frontend import hidden_figures, probe_figures, probe_strip


def test_hidden_heatmap_is_log10_of_the_norms_with_latest_snapshot():
    events = [
        {
            "kind": "hidden",
            "step": s,
            "payload": {
                "hidden_norms": [1.0, 10.0, 100.0 * s],
                "grad_norms": [0.1, 0.01, 0.001],
                "time_steps": 3,
            },
        }
        for s in (1, 2)
    ]
    fig = hidden_figures.hidden_figure(events)
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    lines = [t for t in fig["data"] if t["type"] == "scatter"]
    assert len(heat) == 2 and len(lines) == 2
    z = [x for r in heat[0]["z"] for x in r]
    assert z == pytest.approx([0.0, 1.0, 2.0, 0.0, 1.0, math.log10(200)])
    assert list(heat[0]["y"]) == [1, 1.5, 2]  # band edges: halfway between snapshots, within the steps
    assert list(lines[0]["y"]) == [1.0, 10.0, 200.0]  # the latest snapshot, as a line
    assert list(heat[1]["z"][0]) == pytest.approx([-1.0, -2.0, -3.0])


def test_hidden_figure_for_feed_forward_layers_and_when_empty():
    ev = {
        "kind": "hidden",
        "step": 5,
        "payload": {
            "layers": [
                {"name": "fc1", "summed_mean": 0.0, "summed_std": 2.0, "act_norm": 3.0},
                {"name": "fc2", "summed_mean": 0.0, "summed_std": 1.0, "act_norm": 1.5},
            ]
        },
    }
    fig = hidden_figures.hidden_figure([ev])
    assert {t["name"] for t in fig["data"]} == {"fc1", "fc2"}
    empty = hidden_figures.hidden_figure([])
    assert not empty["data"] and "Waiting" in str(empty["layout"]["annotations"])


def _fisher(step, weight_sets):
    return {
        "kind": "fisher",
        "step": step,
        "payload": {
            "trace": {"fc1": 2.0, "fc2": 1.0},
            "trace_estimator": {"fc1": "per-sample", "fc2": "summed-gradient"},
            "lambda_max": 10.0,
            "eta_lambda_max": 0.5 * step,
            "hessian_lambda_max": None,
            "cost_steps": 0.4,
            "empirical": None,
            "weight_sets": [
                {
                    "name": f"g{i}",
                    "weight_norm": 1.0 + i,
                    "effective_lr": 0.1,
                    "along_w_curvature": 0.0,
                    "gain_curvature": 1.0,
                }
                for i in range(weight_sets)
            ],
        },
    }


def test_fisher_figure_names_estimators_and_summarises_many_weight_sets():
    fig = probe_figures.fisher_figure([_fisher(1, 3), _fisher(2, 3)])
    names = [t.get("name") for t in fig["data"]]
    assert "fc1" in names and "fc2" in names  # names the plain-word table does not know stay as they are
    hovers = {t["name"]: t.get("hovertemplate", "") for t in fig["data"]}
    assert "fc1 (exact per example)" in hovers["fc1"] and "fc2 (noisy batch estimate)" in hovers["fc2"]
    eta = next(t for t in fig["data"] if t.get("name") == "η·λ_max(F)")
    assert list(eta["y"]) == [0.5, 1.0]
    line = next(t for t in fig["data"] if t.get("name") == "2: stability line")
    assert list(line["y"]) == [2.0, 2.0] and line["legend"] == eta["legend"]  # the stability line, in view
    assert fig["layout"]["yaxis2"]["range"][1] > 2.0
    many = probe_figures.fisher_figure([_fisher(1, 20)])
    wnames = {t["name"] for t in many["data"] if "weight sets" in str(t.get("name"))}
    assert wnames == {"min of 20 weight sets", "median of 20 weight sets", "max of 20 weight sets"}
    wmax = next(t for t in many["data"] if t["name"] == "max of 20 weight sets" and t["y"][0] == 20.0)
    assert wmax is not None


def test_fisher_figure_has_one_legend_per_row_right_of_it_and_one_colour_per_weight_set():
    fig = probe_figures.fisher_figure([_fisher(1, 3), _fisher(2, 3)])
    legends = {t.get("legend", "legend") for t in fig["data"]}
    assert legends == {"legend", "legend3", "legend5"}
    layout = fig["layout"]
    for n, legend in ((1, "legend"), (3, "legend3"), (5, "legend5")):  # right of the row, at its top
        axis = layout["yaxis" if n == 1 else f"yaxis{n}"]
        assert layout[legend]["y"] == pytest.approx(axis["domain"][1])
        assert layout[legend]["x"] > layout["xaxis2"]["domain"][1]  # never over the right column
    for legend in ("legend", "legend3", "legend5"):  # an entry once per legend
        shown = [
            t["name"]
            for t in fig["data"]
            if t.get("legend", "legend") == legend and t.get("showlegend", True)
        ]
        assert len(shown) == len(set(shown)), shown
    layers = {t.get("legend", "legend") for t in fig["data"] if t["name"] in ("fc1", "fc2")}
    assert layers == {"legend"}  # the layers' traces apart from the weight sets
    for g in ("g0", "g1", "g2"):
        colours = {t["line"]["color"] for t in fig["data"] if t["name"] == g}
        assert len(colours) == 1, (g, colours)  # one colour per weight set in every subplot
    assert len({t["line"]["color"] for t in fig["data"] if t["name"] in ("g0", "g1", "g2")}) == 3


def test_fisher_figure_plots_the_measured_effective_step_labelled_by_optimizer():
    events = [_fisher(1, 2), _fisher(2, 2)]
    assert "η/‖w‖²" in str(probe_figures.fisher_figure(events)["layout"]["annotations"])  # older payloads
    for e in events:
        e["payload"]["optimizer"] = "adam"
        for g in e["payload"]["weight_sets"]:
            g["effective_step"], g["optimizer"] = 1e-3, "adam"
    fig = probe_figures.fisher_figure(events)
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    assert "Effective step ‖Δw‖/‖w‖ per update (adam, measured)" in titles
    step = [t for t in fig["data"] if t.get("xaxis") == "x4"]  # the subplot at row 2, column 2
    assert list(step[0]["y"]) == [1e-3, 1e-3]


def test_heatmap_bands_follow_uneven_steps_and_many_snapshots_are_thinned_with_a_note():
    ev = [
        {"kind": "hidden", "step": s, "payload": {"hidden_norms": [1.0, 2.0], "grad_norms": [0.1, 0.2]}}
        for s in (25, 125)
    ]
    fig = hidden_figures.hidden_figure(ev)
    heat = fig["data"][0]
    assert list(heat["y"]) == [25, 75, 125]
    assert fig["layout"]["yaxis"]["range"] == [25, 125]  # within the recorded steps (was −50…190)
    assert hidden_figures.step_edges([1, 2, 10]) == [1, 1.5, 6, 10]
    assert hidden_figures.step_edges([7]) == [6.5, 7.5]
    many = [{"kind": "hidden", "step": s, "payload": {"hidden_norms": [1.0, 2.0]}} for s in range(1, 401)]
    fig = hidden_figures.hidden_figure(many)
    rows = fig["data"][0]["z"]
    assert len(rows) == hidden_figures.MAX_SNAPSHOTS and "400 snapshots" in fig["layout"]["title"]["text"]
    assert fig["data"][0]["customdata"][-1][0] == 400 and fig["data"][0]["customdata"][0][0] == 1


def test_colour_bar_ticks_are_round_norms():
    vals, text = hidden_figures._log_ticks(-1.8, 0.4)
    assert text == ["0.02", "0.05", "0.1", "0.2", "0.5", "1", "2"]
    vals, text = hidden_figures._log_ticks(-6, 3)
    assert all(v == int(v) for v in vals) and len(vals) >= 2  # whole decades over a wide range


def test_fisher_panels_speak_plain_words_with_axis_titles_and_units():
    from frontend import probe_names

    fisher = {
        "step": 5,
        "kind": "fisher",
        "payload": {
            "trace": {"rnn.0.ih": 1.0, "rnn.0.hh": 2.0, "rnn.0.norm_c": 0.1, "out": 3.0},
            "trace_estimator": {"rnn.0.ih": "per-sample", "out": "per-sample"},
            "eta_lambda_max": 0.4,
            "weight_sets": [{"name": "rnn.0.ih.weight", "weight_norm": 2.0}, {"name": "hidden.1.weight"}],
        },
    }
    fig = probe_figures.fisher_figure([fisher])
    names = {t["name"] for t in fig["data"]}
    assert {"LSTM input weights", "LSTM recurrent weights", "LSTM cell-state norm", "output layer"} <= names
    assert "hidden layer 2" in names  # a weight set, in words
    assert not any(n.startswith("rnn.") or n == "out" for n in names)
    titles = [fig["layout"][k]["title"]["text"] for k in sorted(fig["layout"]) if k.startswith("yaxis")]
    assert len(titles) == 6 and "trace of F (per example)" in titles and "‖w‖ (L2 norm)" in titles
    assert probe_names.plain_name("rnn.1.ih_gates", "GRU") == "GRU input-to-gates weights (layer 2)"
    assert probe_names.plain_name("convs.0.weight") == "conv layer 1 weights"
    assert probe_names.plain_name("something.else") == "something.else"


def test_fisher_events_stored_with_the_old_groups_key_draw_the_same_panels():
    events = [_fisher(s, 3) for s in (10, 20)]
    old = [
        {**e, "payload": {("groups" if k == "weight_sets" else k): v for k, v in e["payload"].items()}}
        for e in events
    ]
    assert all("groups" in e["payload"] and "weight_sets" not in e["payload"] for e in old)
    assert probe_figures.fisher_figure(old)["data"] == probe_figures.fisher_figure(events)["data"]


def test_a_lambda_max_short_of_its_tolerance_is_drawn_open_with_its_bound():
    """An estimate flagged as a lower bound gets an open marker and says how far off it may be; one
    within the tolerance a filled marker; events stored before the flag draw filled, without a text."""
    converged, short, old = _fisher(1, 1), _fisher(2, 1), _fisher(3, 1)
    for event, flag, bound in ((converged, False, 0.004), (short, True, 0.07)):
        event["payload"].update(
            lambda_tolerance=0.02, lambda_max_rel_bound=bound, lambda_max_lower_bound=flag
        )
    fig = probe_figures.fisher_figure([converged, short, old])
    line = next(t for t in fig["data"] if t["name"] == "η·λ_max(F)")
    assert list(line["marker"]["symbol"]) == ["circle", "circle-open", "circle"]
    texts = list(line["hovertext"])
    assert "within 2%" in texts[0] and "lower bound" in texts[1] and "7%" in texts[1] and texts[2] == ""
    strip = probe_strip.strip_figure([], [converged, short, old])
    dots = next(t for t in strip["data"] if t["name"] == "η·λ_max")
    assert list(dots["marker"]["symbol"]) == ["circle", "circle-open", "circle"]


def _visible_texts(fig) -> str:
    return " ".join(a["text"] for a in fig["layout"].get("annotations", []) if a.get("visible", True))


def test_an_empty_probe_panel_says_none_were_recorded_only_once_the_run_has_ended():
    # None: the page has not read the run's stored events yet (a finished run opened from the Runs page)
    for ended, says in ((None, "Loading"), (False, "Waiting"), (True, "recorded no")):
        hidden = _visible_texts(hidden_figures.hidden_figure([], ended=ended))
        fisher = _visible_texts(probe_figures.fisher_figure([], ended=ended))
        assert says in hidden and says in fisher, (ended, hidden, fisher)
        if ended is not True:
            assert "recorded no" not in hidden + fisher
