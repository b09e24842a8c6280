"""Panels that need data the engine may not produce on this machine, driven by the synthetic API
(benchmarks.devapi): the probe heatmaps and Fisher panel, and Table 1 rendering with a disagreement."""

from __future__ import annotations

import httpx
import pytest

from normlab.table1 import PROSE_CELL

pytestmark = pytest.mark.browser


def test_run_page_draws_hidden_heatmaps_and_fisher_live(page, shot, dev_server):
    r = httpx.post(
        dev_server.url + "/api/runs",
        json={"task": "adding", "seq_len": 30, "steps": 400, "probes": {"enabled": True, "trace_every": 10}},
    )
    rid = r.json()["id"]
    page.goto(f"{dev_server.url}/run/{rid}")
    page.wait_for_function(
        "() => { const g = document.querySelector('#run-hidden .js-plotly-plot');"
        " return g && g.data.filter(t => t.type === 'heatmap').length === 2 &&"
        " g.data[0].y.length >= 3; }",
        timeout=30000,
    )
    page.wait_for_function(
        "() => { const g = document.querySelector('#run-fisher .js-plotly-plot');"
        " return g && g.data.length >= 4 && g.data[0].x.length >= 2; }",
        timeout=30000,
    )
    rows = page.evaluate("() => document.querySelector('#run-hidden .js-plotly-plot').data[0].z[0].length")
    assert rows == 30  # one column per time step
    shot(page, "run-probes")


def test_invariance_page_renders_a_disagreement(page, shot, dev_server, make_table1):
    # the computed table differs from the printed one in one cell: weight norm, dataset re-scaling
    table = make_table1(flip=PROSE_CELL)
    table.max_abs_diff["weight"]["dataset_rescaling"] = 2e-16
    table.notes = []  # the page then states the prose-vs-table verdict itself
    dev_server.api.invariance = table.model_dump(mode="json")
    try:
        page.goto(dev_server.url + "/invariance")
        page.wait_for_selector(".computed-cell.disagree", timeout=15000)
        assert page.locator(".computed-cell").count() == 18
        assert page.locator(".computed-cell.disagree").count() == 1
        cell = page.locator('[data-cell="weight/dataset_rescaling"]')
        assert "Invariant" in cell.inner_text() and "2.0e-16" in cell.inner_text()
        assert "the prose is right" in page.locator(".notes").inner_text()
        shot(page, "invariance-synthetic")
    finally:
        dev_server.api.invariance = None


def test_live_appends_never_repeat_a_point(page, dev_server):
    """Six runs streaming into one Compare page, drained every 100 ms with the redraw throttle off: every
    trace's x keeps strictly increasing. (Dash's extendData queues a batch until its async redraw
    resolves; a batch that came before that was applied again on top of the next one.)"""
    ids = [
        httpx.post(
            dev_server.url + "/api/runs",
            json={"task": "digits", "norm": norm, "steps": 1000, "eval_every": 10},
            timeout=10,
        ).json()["id"]
        for norm in ("layer", "batch", "none", "rms", "weight", "layer")
    ]
    try:
        # smooth=0: one trace per run and panel (Compare smooths the training loss by default)
        page.goto(f"{dev_server.url}/compare?runs={','.join(ids)}&panels=loss,val,metric&smooth=0")
        page.wait_for_selector("#nl-curves .js-plotly-plot", timeout=15000)
        page.evaluate("() => { normlabStream.adaptive = false; }")
        # a slow machine (a talk's laptop, a loaded CI box): each redraw outlasts the 100 ms tick
        page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": 8})
        page.wait_for_function("() => window.normlabStream.appended > 1500", timeout=60000)
        xs = page.evaluate(
            "() => document.querySelector('#nl-curves .js-plotly-plot').data"
            ".filter(t => t.fill !== 'toself').map(t => Array.from(t.x || []))"
        )
        assert len(xs) == 18
        for x in xs:
            repeats = [(a, b) for a, b in zip(x, x[1:], strict=False) if b <= a]
            assert not repeats, f"points drawn twice or out of order: {repeats[:5]}"
        assert not page.errors, page.errors
    finally:
        for rid in ids:
            httpx.post(f"{dev_server.url}/api/runs/{rid}/cancel", timeout=10)
