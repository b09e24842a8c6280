"""Demo-readiness in a real Chromium against `normlab up` (issue 19): the first point soon after the
click, and a run cancelled before its first point is cancelled at once and its chart says so.

Both failed on the code before the warm worker parent (issue 19's 7-9 s to the first point; a cancel
waited for the run's set-up and the chart kept "Waiting for the first training points…")."""

from __future__ import annotations

import time

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quiet_queue")]

POINTS_JS = """() => { const g = document.querySelector('#nl-curves .js-plotly-plot');
  if (!g || !g.data) return -1; return g.data.reduce((n, t) => n + (t.x ? t.x.length : 0), 0); }"""
NOTE_JS = """(text) => { const g = document.querySelector('#nl-curves .js-plotly-plot');
  return !!(g && g.layout) && (g.layout.annotations || []).some(a => (a.text || '').includes(text)); }"""
# Target 1 s (median, `normlab bench demo`); the bound leaves room for this shared 2-core machine's load.
FIRST_POINT_BOUND_S = 2.5
CANCEL_BOUND_S = 1.5  # target 1 s from the API; the click adds the Dash callback's round trip


def _field(page, name: str, value: str) -> None:
    box = page.locator(f'[id*="lab-field"][id*="{name}"]')
    box.fill(value)
    box.press("Tab")


def test_click_to_first_point_on_the_lab_page(page, shot, server):
    page.goto(server.url + "/")
    page.wait_for_selector(".builder .field-grid input")
    _field(page, "batch_size", "4")
    _field(page, "steps", "20000")  # still running when the test ends (quiet_queue cancels it)
    assert page.evaluate(POINTS_JS) <= 0
    button = page.get_by_role("button", name="Start run")
    t0 = time.monotonic()
    button.click()
    page.wait_for_function(f"() => ({POINTS_JS})() > 0", timeout=30000, polling=20)
    took = time.monotonic() - t0
    shot(page, "demo-first-point")
    assert took < FIRST_POINT_BOUND_S, f"first point {took:.2f} s after the click"
    assert not page.errors, page.errors


def test_cancel_before_the_first_point_is_quick_and_the_chart_says_cancelled(page, shot, server):
    # An LSTM over 1000 steps: its first point comes after 50 training steps of seconds each, and a
    # single step does not look at the stop flag, so the cancel lands where the engine cannot see it.
    spec = {"task": "adding", "norm": "layer", "seq_len": 1000, "hidden_size": 256, "steps": 20000}
    r = httpx.post(server.url + "/api/runs", json=spec, timeout=10)
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    deadline = time.monotonic() + 60
    while httpx.get(f"{server.url}/api/runs/{rid}", timeout=10).json()["status"] != "running":
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)
    page.goto(f"{server.url}/run/{rid}")
    page.wait_for_function(NOTE_JS, arg="Waiting for the first training points", timeout=15000)
    metrics = httpx.get(f"{server.url}/api/runs/{rid}/metrics", timeout=10).json()
    assert metrics["total_points"] == 0  # no point yet: the cancel comes before the first
    t0 = time.monotonic()
    page.get_by_role("button", name="Cancel run").click()
    page.wait_for_function(
        NOTE_JS, arg="Cancelled before the first training points", timeout=15000, polling=20
    )
    took = time.monotonic() - t0
    shot(page, "demo-cancelled-before-first-point")
    assert httpx.get(f"{server.url}/api/runs/{rid}", timeout=10).json()["status"] == "cancelled"
    assert took < CANCEL_BOUND_S, f"cancelled {took:.2f} s after the click"
    assert not page.evaluate(NOTE_JS, "Waiting for the first training points")
    assert not page.errors, page.errors
