"""Compare's state in the URL and across navigation, smoothing and hover, the Runs table's numbers, and
what a page loads — in Chromium, over the synthetic API (one shared server; runs take seconds)."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from frontend.smoothing import ema, format_elapsed

pytestmark = pytest.mark.browser

GD = "document.querySelector('#nl-curves .js-plotly-plot')"


def _run(server, **spec) -> str:
    r = httpx.post(server.url + "/api/runs", json={"task": "digits", **spec}, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _wait_ended(server, rid: str, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if httpx.get(f"{server.url}/api/runs/{rid}", timeout=10).json()["status"] == "completed":
            return
        time.sleep(0.1)
    raise AssertionError(f"run {rid} did not end")


def test_compare_url_follows_each_control_at_once_and_the_comparison_survives_navigation(
    page, shot, dev_server
):
    a, b = _run(dev_server, norm="layer", steps=40), _run(dev_server, norm="batch", steps=40)
    scripts: list[tuple[str, int]] = []
    page.on(
        "requestfinished",
        lambda r: (
            scripts.append((r.url, r.sizes()["responseBodySize"])) if r.resource_type == "script" else None
        ),
    )
    page.goto(f"{dev_server.url}/compare?runs={a},{b}")
    page.wait_for_selector("#cmp-legend .run-chip", timeout=15000)
    page.wait_for_function(f"() => {GD} && {GD}.data.length > 0", timeout=15000)

    # The server does not answer the redraw at all (a slow one, at worst): the URL must not wait for it.
    callbacks = re.compile(r".*/_dash-update-component.*")  # with its ?endId= query
    page.route(callbacks, lambda route: route.abort())
    page.get_by_text("wall time", exact=True).click()
    page.wait_for_function("() => /[?&]x=time(&|$)/.test(location.search)", timeout=1000)
    page.get_by_text("batch size", exact=True).click()
    page.wait_for_function("() => /[?&]color=batch_size(&|$)/.test(location.search)", timeout=1000)
    page.click("#nl-copy-link")
    # the copy is a clientside callback, run by Dash's queue just after the click (no server round trip)
    copied = page.wait_for_function("() => window.normlabLastCopied", timeout=2000).json_value()
    assert "x=time" in copied and "color=batch_size" in copied and f"runs={a},{b}" in copied
    page.unroute(callbacks)

    # nav: Runs, then Compare: the last comparison again, not an empty page; and after a reload
    page.locator(".nav").get_by_text("Runs", exact=True).click()
    page.wait_for_selector("#runs-table", timeout=15000)
    page.locator(".nav").get_by_text("Compare", exact=True).click()
    page.wait_for_function("() => /runs=/.test(location.search)", timeout=15000)
    page.wait_for_function(
        "() => document.querySelectorAll('#cmp-legend .run-chip').length === 2", timeout=15000
    )
    assert "x=time" in page.url and "color=batch_size" in page.url
    page.reload()
    page.wait_for_function(
        "() => document.querySelectorAll('#cmp-legend .run-chip').length === 2", timeout=15000
    )
    page.wait_for_function(f"() => {GD} && {GD}.layout.xaxis.title.text === 'wall time (s)'", timeout=15000)

    # the run picker says how a run ended, not the "running" of when the page opened
    c = _run(dev_server, norm="rms", steps=100)  # 4 s
    page.goto(f"{dev_server.url}/compare?runs={c}")
    picker = "((document.querySelector('#cmp-runs') || {}).innerText || '')"
    page.wait_for_function(f"() => /running|queued/.test({picker})", timeout=15000)
    page.wait_for_function(f"() => /rms .* completed/.test({picker})", timeout=20000)
    shot(page, "compare-url-restored")
    # page weight: plotly.js is the cartesian partial bundle, loaded because this page draws a graph
    plotly = [(u, n) for u, n in scripts if "plotly" in u]
    assert plotly and all("plotly-cartesian" in u for u, _ in plotly), plotly
    assert sum(n for _, n in plotly) < 1_600_000
    refused = ("net::ERR_FAILED", "the server did not respond")  # the redraws refused above
    errors = [e for e in page.errors if not any(r in e for r in refused)]
    assert not errors, errors


def test_run_page_smooths_live_curves_and_hover_says_run_step_value_and_wall_time(page, shot, dev_server):
    rid = _run(dev_server, norm="layer", steps=500, eval_every=50)  # 20 s of points at 25 per second
    try:
        page.goto(f"{dev_server.url}/run/{rid}")
        page.wait_for_function(f"() => {GD} && {GD}.data[0].x.length > 5", timeout=20000)
        box = page.locator("#run-smooth input")
        box.fill("0.9")
        box.press("Tab")  # the box commits on blur
        page.wait_for_function(f"() => {GD}.data.some(t => String(t.meta).endsWith(':raw'))", timeout=15000)
        n0 = page.evaluate(f"() => {GD}.data[1].x.length")
        page.wait_for_function(f"() => {GD}.data[1].x.length > {n0 + 10}", timeout=20000)  # live points
        traces = page.evaluate(
            f"() => {GD}.data.map(t => ({{meta: t.meta, y: Array.from(t.y || []),"
            " opacity: t.opacity, custom: t.customdata}))"
        )
        raw = next(t for t in traces if t["meta"] == f"{rid}:raw")
        smooth = next(t for t in traces if t["meta"] == rid)
        n = min(len(raw["y"]), len(smooth["y"]))
        assert n > n0 + 10 and raw["opacity"] < 0.5
        # history (server) and live points (browser) together equal the EMA of the raw series, exactly
        assert smooth["y"][:n] == pytest.approx(ema(raw["y"][:n], 0.9)[0], rel=1e-12)
        assert [c[0] for c in smooth["custom"][:n]] == sorted(c[0] for c in smooth["custom"][:n])

        # hover on the newest point: run, step, value, formatted wall time
        k = n - 1
        page.evaluate(
            f"() => Plotly.Fx.hover({GD}, [{{curveNumber: {traces.index(smooth)}, pointNumber: {k}}}])"
        )
        text = page.locator("#nl-curves .hoverlayer .hovertext").first.text_content() or ""
        step, wall, _ = smooth["custom"][k]
        assert "layer · bs" in text and f"step {step}" in text and "train loss" in text
        assert f"{smooth['y'][k]:.4g}"[:4] in text and f"wall time {wall}" in text
        assert re.fullmatch(r"\d+\.\d+ s|\d+ min \d\d s", wall)
        # the browser formats live points' wall time as the server does
        for sec in (0.5, 9.996, 12.34, 59.96, 61.5, 3725.0):
            assert page.evaluate(f"() => normlabStream.formatElapsed({sec})") == format_elapsed(sec)
        shot(page, "run-smoothing-hover")

        # the setting stays with the browser: the page opens smoothed again
        page.reload()
        page.wait_for_function(
            f"() => {GD} && {GD}.data.some(t => String(t.meta).endsWith(':raw'))", timeout=20000
        )
        assert page.locator("#run-smooth [role=slider]").get_attribute("aria-valuenow") == "0.9"
        assert not page.errors, page.errors
    finally:
        httpx.post(f"{dev_server.url}/api/runs/{rid}/cancel", timeout=10)
        page.context.clear_cookies()


def test_runs_table_results_are_numeric_columns_that_sort_as_numbers(page, shot, dev_server):
    rids = [_run(dev_server, norm=n, steps=20) for n in ("layer", "batch", "none")]
    for rid in rids:
        _wait_ended(dev_server, rid)
    # walls whose text order differs from their numeric order: "10.4" < "2.4" < "9.5" as text
    for rid, wall, loss in zip(rids, (2.4, 10.4, 9.5), (0.5, 0.07, 0.3), strict=True):
        dev_server.api.runs[rid]["summary"] = {
            "metrics": {"val_loss": loss, "test_accuracy": 1 - loss},
            "step": 20,
            "wall_time": wall,
        }
    # one task's runs (a loss sort groups several tasks' runs by task first, and the synthetic API
    # may hold other tests' runs of other tasks)
    page.goto(f"{dev_server.url}/runs?group=&norm=&task=digits")
    page.wait_for_selector("#runs-table td[data-dash-column=wall_time]", timeout=15000)
    headers = page.locator("#runs-table th").all_inner_texts()
    assert any("Val loss" in h for h in headers) and any("Steps/s" in h for h in headers)
    page.locator("#runs-table th[data-dash-column=wall_time] .column-header--sort").first.click()

    def column(name):
        cells = page.locator(f"#runs-table td[data-dash-column={name}]").all_inner_texts()
        return [float(c) for c in cells if c.strip()]

    walls = column("wall_time")
    assert walls == sorted(walls) and {2.4, 9.5, 10.4} <= set(walls)
    page.locator("#runs-table th[data-dash-column=val_loss] .column-header--sort").first.click()
    losses = column("val_loss")
    assert losses == sorted(losses) and {0.07, 0.3, 0.5} <= set(losses)
    shot(page, "runs-numeric-columns")
    assert not page.errors, page.errors


def test_preset_verdict_goes_live_and_compare_draws_bands_and_a_sweep_table(page, shot, dev_server):
    dev_server.api.rate = 400.0  # the synthetic runs finish in about a second
    try:
        page.goto(f"{dev_server.url}/presets")
        card = page.locator(".preset.card").filter(has_text="batch size 128")
        card.get_by_role("button", name="Start 2 runs × 5 seeds").click()
        box = card.locator(".verdict-box")
        box.locator(".verdict").first.wait_for(timeout=20000)
        page.wait_for_function(
            "() => /All 10 runs ended/.test(document.querySelector('.verdict-box').innerText)", timeout=30000
        )
        text = box.inner_text()
        assert re.search(r"(holds|does not hold).*Δ = [−+]\d", text) and "rule:" in text
        page.reload()  # the launch is remembered: the verdict is there again
        page.locator(".preset.card").filter(has_text="batch size 128").locator(".verdict").first.wait_for(
            timeout=20000
        )
        shot(page, "preset-verdict")
        # this preset's own link (other cards show the server's earlier launches of theirs)
        page.locator(".preset.card").filter(has_text="batch size 128").locator(".compare-link").click()
        page.wait_for_url(re.compile(r".*/compare\?group=\w+"), timeout=15000)
        bands = "document.querySelector('#cmp-group-bands .js-plotly-plot')"
        page.wait_for_function(
            f"() => {bands} && {bands}.data.filter(t => t.fill === 'toself').length === 2", timeout=15000
        )
        assert page.locator("#cmp-legend .run-chip").count() == 10  # every seed's own curves too

        sweep = httpx.post(
            dev_server.url + "/api/sweeps",
            timeout=10,
            json={
                "base": {"task": "digits", "steps": 40},
                "norms": ["layer", "batch"],
                "batch_sizes": [4, 16],
                "seeds": [0, 1],
            },
        ).json()
        for rid in sweep["run_ids"]:
            _wait_ended(dev_server, rid)
        page.goto(f"{dev_server.url}/compare?group={sweep['group_id']}")
        page.wait_for_selector("#cmp-group-table td[data-dash-column=mean]", timeout=15000)

        def means():
            cells = page.locator("#cmp-group-table td[data-dash-column=mean]").all_inner_texts()
            return [float(c) for c in cells]

        assert len(means()) == 4 and means() == sorted(means())  # lower loss first
        page.locator("#cmp-group-table th[data-dash-column=mean] .column-header--sort").first.click()
        page.wait_for_function(
            "() => { const c = [...document.querySelectorAll("
            "'#cmp-group-table td[data-dash-column=mean]')].map(e => +e.innerText);"
            " return c.every((v, i) => i === 0 || c[i - 1] >= v); }",
            timeout=5000,
        )
        shot(page, "sweep-table")
        assert not page.errors, page.errors
    finally:
        dev_server.api.rate = 25.0
