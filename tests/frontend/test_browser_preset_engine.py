"""Preset cards in Chromium against `normlab up` with its real engine (reduced steps): a card fills in its
runs' mean ± std curves and its verdict with the effect size as the runs end, and a map card draws its
points; what the browser draws is what GET /api/groups/{id} computed from the trained runs."""

from __future__ import annotations

import time

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.usefixtures("quiet_queue")]


def _launch(server, name: str, **body) -> str:
    r = httpx.post(f"{server.url}/api/presets/{name}", json=body, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()["group_id"]


def _group(server, gid: str) -> dict:
    return httpx.get(f"{server.url}/api/groups/{gid}", timeout=10).json()


def _wait_done(server, gid: str, seconds: float) -> dict:
    deadline = time.time() + seconds
    while not (group := _group(server, gid))["done"]:
        assert time.time() < deadline, f"the preset's runs did not end: {group.get('counts')}"
        time.sleep(0.5)
    return group


def test_a_preset_card_fills_in_its_curves_and_verdict_from_trained_runs(page, shot, server):
    gid = _launch(server, "online", seeds=[0, 1], steps=30)  # 4 runs of 30 single-case steps
    page.goto(f"{server.url}/presets")
    card = page.locator(".preset.card").filter(has=page.locator(f"a[href='/compare?group={gid}']"))
    card.locator(".verdict-box").wait_for(timeout=20000)
    group = _wait_done(server, gid, 120)
    page.wait_for_function(
        "(el) => /All 4 runs ended/.test(el.innerText)", arg=card.element_handle(), timeout=20000
    )
    bands = card.locator(".preset-bands .js-plotly-plot")
    means = page.evaluate(
        "(g) => g.data.filter(t => t.fill !== 'toself').map(t => [t.meta, Array.from(t.x), Array.from(t.y)])",
        bands.element_handle(),
    )
    filled = page.evaluate("(g) => g.data.filter(t => t.fill === 'toself').length", bands.element_handle())
    arms = {c["label"]: c["curve"] for c in group["arms"]}
    assert filled == 2 and sorted(m[0] for m in means) == sorted(arms) == ["layer", "none"]
    for label, xs, ys in means:
        assert xs == arms[label]["steps"] and xs[-1] == 30
        assert ys == pytest.approx(arms[label]["mean"])
    text = card.locator(".verdict-box").inner_text()
    better = next(c for c in group["claims"] if c["kind"] == "better")
    assert "layer better than none" in text and "Δ = " in text
    assert ("holds" if better["holds"] else "does not hold") in text
    assert "Setup here and in the paper" in card.inner_text()
    shot(page, "preset-card-engine")
    assert not page.errors, page.errors


def test_a_map_card_draws_its_points_as_trained_runs_end(page, shot, server):
    gid = _launch(server, "map-ln-none-lr", seeds=[0, 1], steps=10)  # 16 runs of 10 steps
    page.goto(f"{server.url}/presets")
    card = page.locator(".preset.card").filter(has=page.locator(f"a[href='/compare?group={gid}']"))
    graph = card.locator(".map-graph .js-plotly-plot")
    graph.wait_for(timeout=60000)
    group = _wait_done(server, gid, 240)
    # the card's graph, looked up afresh each time: a redraw may replace the element a handle would hold
    find = (
        f"document.querySelector(\"a[href='/compare?group={gid}']\")"
        ".closest('.preset.card').querySelector('.map-graph .js-plotly-plot')"
    )
    points = group["map"]["points"]
    assert len(points) == 4 and all(p["n"] == 2 for p in points)
    want = [p["difference"] for p in points]
    # the card catches up with the finished group: its four points are the API's, as the runs ended
    page.wait_for_function(
        f"(want) => {{ const g = {find}; const y = g && g.data && g.data[0] && g.data[0].y;"
        " return !!y && y.length === want.length && Array.from(y).every((v, i) => v !== null"
        " && Math.abs(v - want[i]) <= 1e-6 * Math.max(1, Math.abs(want[i]))); }",
        arg=want,
        timeout=30000,
    )
    xs = page.evaluate(f"() => Array.from({find}.data[0].x)")
    assert xs == [str(p["value"]) for p in points]
    shot(page, "preset-map-engine")
    assert not page.errors, page.errors
