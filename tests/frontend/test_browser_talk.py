"""The talk and the shared lab, as a newcomer meets them, in a real headless Chromium: presentation mode
draws the probe panels and enlarges every word, a claim is pending (never ✗) until its seeds are in,
presets and sweeps remember their results in any browser, smoothing opens at 0.6 on the dense curve
only and a copied link keeps it, the probe panels speak plain words with a probe strip on the Lab, and
no graph offers to upload its data. The queue's order and the Lab's position run on the real server
(test_browser_queue.py); the rest on the synthetic API, so each takes seconds."""

from __future__ import annotations

import math
import re
import time

import httpx
import pytest

pytestmark = pytest.mark.browser

HIDDEN = "document.querySelector('#run-hidden .js-plotly-plot')"
FISHER = "document.querySelector('#run-fisher .js-plotly-plot')"
CURVES = "document.querySelector('#nl-curves .js-plotly-plot')"


def _probe_run(server, steps: int = 400) -> str:
    r = httpx.post(
        server.url + "/api/runs",
        json={
            "task": "adding",
            "seq_len": 30,
            "steps": steps,
            "probes": {"enabled": True, "trace_every": 10},
        },
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _font_px(page, selector: str) -> float:
    return page.evaluate(
        "(sel) => parseFloat(getComputedStyle(document.querySelector(sel)).fontSize)", selector
    )


def _cancel(server, run_ids) -> None:
    for rid in run_ids:
        httpx.post(f"{server.url}/api/runs/{rid}/cancel", timeout=10)


def test_presentation_mode_draws_the_probe_panels_and_enlarges_every_word(page, shot, dev_server):
    rid = _probe_run(dev_server)
    try:
        # a run opened in presentation mode before its first evaluation: the validation panel is still
        # empty when the curves are first drawn, and no axis is drawn before it has a place (plotly
        # logs "<path> attribute d: Expected number" for such a line)
        late = httpx.post(
            dev_server.url + "/api/runs",
            json={"task": "adding", "seq_len": 30, "steps": 400, "eval_every": 400},
            timeout=10,
        ).json()["id"]
        page.goto(f"{dev_server.url}/run/{late}?present=1")
        page.wait_for_function(f"() => {CURVES} && {CURVES}.data[0].x.length > 0", timeout=15000)
        assert page.evaluate(f"() => {CURVES}.data[2].x.length") == 0  # no evaluation yet
        assert not page.errors, page.errors
        _cancel(dev_server, [late])
        page.goto(f"{dev_server.url}/run/{rid}")
        # the Present button switches the mode on (and says how to leave it)
        page.get_by_role("button", name="Present").click()
        page.wait_for_url(re.compile(r".*present=1.*"), timeout=15000)
        page.wait_for_function("() => document.body.classList.contains('present')", timeout=15000)
        assert page.locator("#nl-present-toggle").inner_text() == "Exit presentation"
        # the probe panels draw in presentation mode: two heatmaps and the Fisher estimates
        page.wait_for_function(
            f"() => {HIDDEN} && {HIDDEN}.data.filter(t => t.type === 'heatmap').length === 2", timeout=30000
        )
        page.wait_for_function(f"() => {FISHER} && {FISHER}.data.length >= 4", timeout=30000)
        text = page.locator(".run-page").inner_text()
        assert "no hidden-state snapshots" not in text and "no Fisher estimates" not in text
        assert _font_px(page, ".panel-help") >= 18 and _font_px(page, "#run-smooth .dash-slider-mark") >= 18
        shot(page, "talk-present-run")
        # no callback answered 500, and no graph drew a path with NaN coordinates
        assert not page.errors, page.errors
        page.get_by_role("button", name="Exit presentation").click()
        page.wait_for_function("() => !document.body.classList.contains('present')", timeout=15000)
        assert "present=" not in page.url
    finally:
        _cancel(dev_server, [rid])

    # claim rules and "Expect:" lines are as large as the rest
    dev_server.api.rate = 400.0
    try:
        body = httpx.post(f"{dev_server.url}/api/presets/fig6-batch128", json={"seeds": [0, 1]}, timeout=10)
        page.goto(f"{dev_server.url}/compare?group={body.json()['group_id']}&present=1")
        page.locator("#cmp-group-verdicts .rule").first.wait_for(timeout=20000)
        assert _font_px(page, "#cmp-group-verdicts .rule") >= 18
        assert _font_px(page, "#cmp-group-verdicts .expect") >= 18
    finally:
        dev_server.api.rate = 25.0


def test_a_claim_is_pending_until_its_seeds_are_in_never_failed_first(page, shot, dev_server):
    dev_server.api.rate = 25.0  # 1,000 steps: the runs stay live for the whole check
    page.goto(f"{dev_server.url}/presets")
    card = page.locator(".preset.card").filter(has_text="batch size 4")
    card.get_by_role("button", name=re.compile(r"Start 2 runs × 5 seeds")).click()
    verdict = card.locator(".verdict").first
    verdict.wait_for(timeout=20000)
    try:
        text = card.locator(".verdict-box").inner_text()
        assert "pending — 0 of 5 seeds in" in text, text
        assert "✗" not in text and "does not hold" not in text and "✓" not in text
        assert "pending" in (verdict.get_attribute("class") or "")
        shot(page, "talk-claim-pending")
    finally:
        group = page.evaluate("() => JSON.parse(localStorage.getItem('preset-groups'))")
        runs = httpx.get(
            f"{dev_server.url}/api/runs", params={"group": group["fig6-batch4"]["group"]}, timeout=10
        ).json()["items"]
        _cancel(dev_server, [r["id"] for r in runs])


def test_preset_and_sweep_results_are_found_again_from_a_fresh_browser(page, browser, shot, dev_server):
    dev_server.api.rate = 400.0  # the synthetic runs finish in about a second
    try:
        gid = httpx.post(f"{dev_server.url}/api/presets/online", json={"seeds": [0, 1]}, timeout=10).json()[
            "group_id"
        ]
        deadline = time.time() + 30
        while not httpx.get(f"{dev_server.url}/api/groups/{gid}", timeout=10).json()["done"]:
            assert time.time() < deadline, "the preset's runs did not end"
            time.sleep(0.2)
        # a browser that never launched it: the verdict, the bands and the link are there
        page.goto(f"{dev_server.url}/presets")
        card = page.locator(".preset.card").filter(has=page.locator(f"a[href='/compare?group={gid}']"))
        card.locator(".verdict").first.wait_for(timeout=20000)
        assert "runs ended" in card.inner_text()
        bands = card.locator(".preset-bands .js-plotly-plot")
        bands.wait_for(timeout=15000)
        assert (
            page.evaluate("(g) => g.data.filter(t => t.fill === 'toself').length", bands.element_handle())
            >= 1
        )
        shot(page, "talk-preset-remembered")

        # a sweep from the Lab: its group is a link, and "Compare these runs" opens its results table
        page.goto(f"{dev_server.url}/")
        page.get_by_text("Sweep: several normalizers").click()
        # the sweep's "Batch sizes" and "Seeds" replace the single run's fields: never two of each
        single = page.locator("[id*='lab-box'][id*='\"batch_size\"'], [id*='lab-box'][id*='\"seed\"']")
        page.wait_for_function(
            "() => [...document.querySelectorAll('[id*=lab-box]')].filter(e => /\"(batch_size|seed)\"/"
            ".test(e.id)).every(e => e.offsetParent === null)",
            timeout=10000,
        )
        assert single.count() == 2
        page.locator("#lab-sweep-batch").fill("4, 16")
        page.get_by_role("button", name="Start sweep").click()
        link = page.locator("#lab-message a.group-link")
        link.wait_for(timeout=20000)
        href = link.get_attribute("href") or ""
        assert re.fullmatch(r"/compare\?group=\w+", href), href
        compare = page.locator("#lab-compare-link")
        page.wait_for_function(
            "(g) => (document.querySelector('#lab-compare-link').getAttribute('href') || '').includes(g)",
            arg=href.split("=")[1],
            timeout=15000,
        )
        compare.click()
        page.wait_for_selector("#cmp-group-table", timeout=20000)
        assert page.locator("#cmp-group-table").count() == 1
    finally:
        dev_server.api.rate = 25.0


def test_smoothing_opens_at_0_6_on_the_dense_curve_only_and_a_copied_link_keeps_it(
    page, browser, shot, dev_server
):
    dev_server.api.rate = 400.0
    try:
        rid = httpx.post(
            dev_server.url + "/api/runs",
            json={"task": "digits", "norm": "layer", "steps": 300, "eval_every": 50},
            timeout=10,
        ).json()["id"]
        deadline = time.time() + 30
        while httpx.get(f"{dev_server.url}/api/runs/{rid}", timeout=10).json()["status"] != "completed":
            assert time.time() < deadline
            time.sleep(0.1)
        page.goto(f"{dev_server.url}/run/{rid}")
        page.wait_for_function(f"() => {CURVES} && {CURVES}.data.length > 0", timeout=20000)
        assert page.locator("#run-smooth [role=slider]").get_attribute("aria-valuenow") == "0.6"
        traces = page.evaluate(
            f"() => {CURVES}.data.map(t => ({{meta: String(t.meta), x: t.xaxis, y: Array.from(t.y),"
            " raw: t.hovertemplate === undefined}))"
        )
        raws = [t for t in traces if t["meta"] == f"{rid}:raw"]
        lines = [t for t in traces if t["meta"] == rid]
        assert len(raws) == 1 and raws[0]["x"] in (None, "x")  # raw, faint, under the training loss only
        loss = next(t for t in lines if t["x"] in (None, "x"))
        assert loss["y"] != raws[0]["y"]  # the dense curve is smoothed …
        val = [t for t in lines if t["x"] not in (None, "x")]
        assert val and all(len(t["y"]) <= 7 for t in val)  # … the sparse evaluations are drawn as measured
        metrics = httpx.get(
            f"{dev_server.url}/api/runs/{rid}/metrics", params={"names": "val_loss"}, timeout=10
        ).json()["series"]["val_loss"]["value"]
        assert any(t["y"] == pytest.approx(metrics) for t in val)

        box = page.locator("#run-smooth input")
        box.fill("0.9")
        box.press("Tab")
        page.wait_for_function("() => location.search.includes('smooth=0.9')", timeout=15000)
        page.goto(page.url + "&panels=loss,val")
        page.wait_for_function(f"() => {CURVES} && {CURVES}.data.length > 0", timeout=20000)
        page.get_by_role("button", name="Copy link").click()
        page.wait_for_function("() => !!window.normlabLastCopied", timeout=15000)  # the clientside copy
        copied = page.evaluate("() => window.normlabLastCopied")
        assert "smooth=0.9" in copied and "panels=loss,val" in copied
        fresh = browser.new_context(viewport={"width": 1400, "height": 950})  # no cookie: only the link
        try:
            other = fresh.new_page()
            other.goto(copied)
            other.wait_for_function(f"() => {CURVES} && {CURVES}.data.length > 0", timeout=20000)
            slider = other.locator("#run-smooth [role=slider]")
            assert slider.get_attribute("aria-valuenow") == "0.9"
            n_axes = other.evaluate(
                f"() => Object.keys({CURVES}.layout).filter(k => /^xaxis/.test(k)).length"
            )
            assert n_axes == 2
        finally:
            fresh.close()
    finally:
        dev_server.api.rate = 25.0
        page.context.clear_cookies()


def test_curvature_panels_speak_plain_words_and_the_lab_has_a_probe_strip(page, shot, dev_server):
    rid = _probe_run(dev_server, steps=600)
    try:
        page.goto(f"{dev_server.url}/run/{rid}")
        page.wait_for_function(f"() => {FISHER} && {FISHER}.data.length >= 4", timeout=30000)
        names = page.evaluate(f"() => {FISHER}.data.map(t => t.name)")
        assert not any(re.match(r"rnn\.\d|out$", n or "") for n in names), names
        assert any("LSTM" in (n or "") for n in names) and "output layer" in names
        titles = page.evaluate(
            f"() => Object.entries({FISHER}.layout).filter(([k]) => /^yaxis/.test(k))"
            ".map(([, a]) => a.title && a.title.text)"
        )
        assert len([t for t in titles if t]) == 6 and "trace of F (per example)" in titles
        assert page.locator(".run-page .panel-help").count() >= 3
        shot(page, "talk-fisher-plain")

        # the Lab: a run with probes on the board gets a compact probe strip
        page.goto(f"{dev_server.url}/?runs={rid}")
        page.locator("#lab-strip").wait_for(state="visible", timeout=20000)
        strip = "document.querySelector('#lab-strip-graph .js-plotly-plot')"
        page.wait_for_function(f"() => {strip} && {strip}.data.length >= 2", timeout=30000)
        assert "stable" in page.locator("#lab-strip .panel-help").inner_text()
        shot(page, "talk-lab-probe-strip")
    finally:
        _cancel(dev_server, [rid])


def test_no_graph_offers_to_send_its_data_to_plotly_cloud(page, dev_server):
    rid = _probe_run(dev_server)
    try:
        for path in (f"/run/{rid}", f"/compare?runs={rid}", f"/?runs={rid}"):
            page.goto(dev_server.url + path)
            page.wait_for_function(f"() => {CURVES} && {CURVES}.data", timeout=20000)
            page.hover("#nl-curves .js-plotly-plot")
            page.locator("#nl-curves .modebar-btn").first.wait_for(state="attached", timeout=15000)
            titles = page.evaluate(
                "() => [...document.querySelectorAll('.modebar-btn')].map(b => b.getAttribute('data-title'))"
            )
            assert any("PNG" in (t or "") for t in titles), titles  # the mode bar is there …
            assert not any("Share" in (t or "") or "Cloud" in (t or "") for t in titles), (path, titles)
    finally:
        _cancel(dev_server, [rid])


def test_run_page_log_is_live_and_an_empty_loss_axis_waits_over_a_loss_range(page, shot, dev_server):
    dev_server.api.rate = 25.0
    r = httpx.post(
        dev_server.url + "/api/runs",
        json={"task": "adding", "seq_len": 30, "steps": 300, "eval_every": 150},
        timeout=10,
    )
    rid = r.json()["id"]
    try:
        page.goto(f"{dev_server.url}/run/{rid}")
        page.wait_for_function(
            f"() => {CURVES} && {CURVES}._fullLayout && {CURVES}._fullLayout.yaxis2", timeout=15000
        )
        # before the first evaluation (step 150, 6 s in): the validation axis spans 0.01-10, not
        # plotly's 0.1-10,000
        assert page.evaluate(f"() => {CURVES}.data[2].x.length") == 0
        low, high = page.evaluate(f"() => {CURVES}._fullLayout.yaxis2.range")
        assert (round(low, 6), round(high, 6)) == (-2.0, 1.0)
        size = page.evaluate(f"() => JSON.stringify({CURVES}._fullLayout._size)")
        log = page.locator("#run-log")
        # the log panel follows the run: its start, then each evaluation as it comes
        page.wait_for_function(
            "() => document.querySelector('#run-log').innerText.includes('run running')", timeout=15000
        )
        page.wait_for_function(
            "() => document.querySelector('#run-log').innerText.includes('evaluation: val loss')",
            timeout=20000,
        )
        first = log.inner_text().count("evaluation:")
        page.wait_for_function(
            "(n) => document.querySelector('#run-log').innerText.split('evaluation:').length - 1 > n",
            arg=first,
            timeout=20000,
        )
        # from its first point on, the validation axis follows the data
        vals = page.evaluate(f"() => {CURVES}.data[2].y")
        low, high = page.evaluate(f"() => {CURVES}._fullLayout.yaxis2.range")
        assert page.evaluate(f"() => {CURVES}._fullLayout.yaxis2.autorange") is True
        assert low <= math.log10(min(vals)) and math.log10(max(vals)) <= high
        assert high - low < 2  # fitted to the values, not the placeholder's three decades
        # the margins stay where they were while the ranges and their labels change under the appends
        assert page.evaluate(f"() => JSON.stringify({CURVES}._fullLayout._size)") == size
        shot(page, "talk-run-log-live")
        assert not page.errors, page.errors
    finally:
        _cancel(dev_server, [rid])


def test_runs_table_sorts_val_loss_within_each_task(page, shot, dev_server):
    dev_server.api.rate = 400.0  # the synthetic runs finish in about a second
    try:
        made = []
        for task, norm in (("digits", "layer"), ("adding", "layer"), ("digits", "none"), ("adding", "none")):
            r = httpx.post(
                dev_server.url + "/api/runs", json={"task": task, "norm": norm, "steps": 200}, timeout=10
            )
            made.append(r.json()["id"])
        deadline = time.time() + 30
        while any(
            httpx.get(f"{dev_server.url}/api/runs/{rid}", timeout=10).json()["status"] != "completed"
            for rid in made
        ):
            assert time.time() < deadline, "the runs did not end"
            time.sleep(0.2)
    finally:
        dev_server.api.rate = 25.0
    page.goto(dev_server.url + "/runs")
    page.wait_for_selector(f"#runs-table >> text={made[0]}", timeout=15000)
    page.locator('#runs-table th[data-dash-column="val_loss"] .column-header--sort').click()
    # the table groups the runs by task, then ranks val loss inside each (the sort is a round trip)
    grouped = """() => { const ts = [...document.querySelectorAll('#runs-table td[data-dash-column="task"]')]
        .map(c => c.innerText);
      const runs = ts.filter((t, i) => i === 0 || ts[i - 1] !== t).length;
      return ts.length >= 4 && runs === new Set(ts).size; }"""
    page.wait_for_function(grouped, timeout=10000)
    rows = page.evaluate(
        """() => [...document.querySelectorAll('#runs-table tbody tr')].filter(r => r.querySelector('td'))
          .map(r => [r.querySelector('td[data-dash-column="task"]').innerText,
                     r.querySelector('td[data-dash-column="val_loss"]').innerText])"""
    )
    tasks = [t for t, _ in rows]
    groups = [t for i, t in enumerate(tasks) if i == 0 or tasks[i - 1] != t]
    assert len(groups) == len(set(groups)) and {"digits", "adding"} <= set(groups), rows
    for task in set(groups):
        losses = [float(v) for t, v in rows if t == task and v.strip()]
        assert losses == sorted(losses), (task, rows)
    shot(page, "talk-runs-sorted-within-task")


def test_a_probe_runs_page_draws_its_curves_before_its_probe_panels(page, dev_server):
    rid = _probe_run(dev_server)
    try:
        deadline = time.time() + 15
        while not httpx.get(f"{dev_server.url}/api/runs/{rid}/metrics", timeout=10).json()["total_points"]:
            assert time.time() < deadline, "the run never reported"
            time.sleep(0.1)
        page.goto(f"{dev_server.url}/run/{rid}")
        # the moment the first heatmap is drawn, the curves already show the run's points
        page.wait_for_function(
            f"""() => {{ const h = {HIDDEN}; const c = {CURVES};
              const drawn = !!(h && h.data && h.data.some(t => t.type === 'heatmap' && t.z && t.z.length));
              if (drawn && window.__curvesThen === undefined) {{
                const points = (t) => (t.x ? t.x.length : 0);
                window.__curvesThen = c && c.data ? c.data.reduce((n, t) => n + points(t), 0) : 0;
              }}
              return drawn; }}""",
            timeout=30000,
            polling="raf",
        )
        assert page.evaluate("() => window.__curvesThen") > 0
        assert not page.errors, page.errors
    finally:
        _cancel(dev_server, [rid])
