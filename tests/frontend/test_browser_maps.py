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
