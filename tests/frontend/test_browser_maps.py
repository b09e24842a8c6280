"""A map preset's card in Chromium over the synthetic API: its points appear as the runs end."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

MAP = "document.querySelector('.preset.card .map-graph .js-plotly-plot')"


def test_a_map_draws_its_points_as_runs_end(page, shot, dev_server):
    dev_server.api.rate = 400.0  # the synthetic runs finish in about a second
    try:
        page.goto(f"{dev_server.url}/presets")
        card = page.locator(".preset.card").filter(has_text="Where does LN beat BN")
        card.get_by_role("button", name="Start 8 runs × 5 seeds").click()
        # the map appears with the first ended pair of runs and fills in until all four batch sizes
        page.wait_for_function(f"() => {MAP} && {MAP}.data[0].x.length >= 1", timeout=30000)
        page.wait_for_function(f"() => {MAP}.data[0].x.length === 4", timeout=60000)
        xs = page.evaluate(f"() => Array.from({MAP}.data[0].x)")
        assert xs == ["2", "4", "16", "128"]
        bars = page.evaluate(f"() => Array.from({MAP}.data[0].error_y.array)")
        assert len(bars) == 4 and all(b >= 0 for b in bars)
        shapes = page.evaluate(f"() => {MAP}.layout.shapes.map(s => s.type)")
        assert "line" in shapes and "rect" in shapes  # the zero line and the claim's shaded side
        shot(page, "preset-map")
        assert not page.errors, page.errors
    finally:
        dev_server.api.rate = 25.0


JUDGED = "document.querySelector('.preset.card .judged-eta_lambda_late .js-plotly-plot')"


def test_edge_of_stability_draws_eta_lambda_at_2_and_states_its_duration_before_start(page, shot, dev_server):
    dev_server.api.rate = 400.0  # the synthetic runs finish in about a second
    dev_server.api.preset_estimates = {
        "edge-of-stability": {"measured": 10, "run_s": 42.0, "one_worker_s": 420.0, "last_launch_s": 200.0}
    }
    try:
        page.goto(f"{dev_server.url}/presets")
        card = page.locator(".preset.card").filter(has_text="Edge of stability")
        # the estimate from the server's measured runs, before Start; a preset never run here has none
        assert "about 7 min on one worker (10 runs, median 42.0 s each" in card.inner_text()
        other = page.locator(".preset.card").filter(has_text="Pre-LN vs post-LN")
        assert "no estimate yet" in other.inner_text()
        card.get_by_role("button", name="Start 2 runs × 5 seeds").click()
        # the card draws what its claims judge: η·λ_max per arm (not the MSE bands), with the edge at 2
        page.wait_for_function(
            f"() => {JUDGED} && {JUDGED}.data.filter(t => (t.meta || '').endsWith(':mean')).length === 2",
            timeout=60000,
        )
        title = page.evaluate(f"() => {JUDGED}.layout.yaxis.title.text")
        assert "η·λ_max" in title
        means = page.evaluate(f"() => {JUDGED}.data.filter(t => t.meta.endsWith(':mean')).map(t => t.y[0])")
        assert all(1.5 < m < 2.5 for m in means), means
        lines = page.evaluate(f"() => {JUDGED}.layout.shapes.filter(s => s.type === 'line').map(s => s.y0)")
        assert lines == [2, 2]
        assert card.locator(".preset-bands").count() == 0
        shot(page, "preset-edge-of-stability")
        assert not page.errors, page.errors
    finally:
        dev_server.api.rate = 25.0
        dev_server.api.preset_estimates = {}


@pytest.mark.parametrize("viewport", [(1280, 720), (1920, 1080)], ids=lambda v: f"{v[0]}x{v[1]}")
def test_presentation_mode_draws_every_cards_charts_large_without_overlaps_or_controls(
    browser, shot, dev_server, viewport
):
    """The Presets page in presentation mode with a band card, a judged card, an equilibrium card and a
    map: every chart in large type, no two texts of one figure overlapping, no form control shown."""
    import httpx

    from tests._poll import wait_for
    from tests.frontend._page_checks import CONTROLS, DRAWN, OVERLAPS

    dev_server.api.rate = 400.0  # the synthetic runs finish in about a second
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    try:
        for name in ("fig6-batch4", "edge-of-stability", "wd-effective-lr", "map-ln-bn-batch"):
            gid = httpx.post(f"{dev_server.url}/api/presets/{name}", json={}, timeout=10).json()["group_id"]
            wait_for(
                lambda gid=gid: httpx.get(f"{dev_server.url}/api/groups/{gid}", timeout=10).json()["done"],
                60,
                f"{name}'s runs did not end",
            )
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{dev_server.url}/presets?present=1")
        page.wait_for_function(DRAWN, timeout=60000)
        charts = "document.querySelectorAll('.preset.card .verdict-box .js-plotly-plot')"
        page.wait_for_function(f"() => {charts}.length >= 4", timeout=60000)
        page.wait_for_function(DRAWN, timeout=60000)
        sizes = page.evaluate(f"() => Array.from({charts}).map(gd => gd._fullLayout.font.size)")
        assert sizes and set(sizes) == {20}, sizes
        assert page.evaluate(OVERLAPS) == []
        assert page.evaluate(CONTROLS) == []
        shot(page, f"presets-present-{viewport[0]}x{viewport[1]}")
        assert not errors, errors
    finally:
        context.close()
        dev_server.api.rate = 25.0
