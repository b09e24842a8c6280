"""The Lab and Run pages in a real headless Chromium: the Lab survives navigation and reloads, the form
refuses empty fields and shows the server's limits, presentation mode launches, the probe settings
reach the run, and the Run page shows the run's log and its Fisher estimates."""

from __future__ import annotations

import re

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quiet_queue")]

POINTS_JS = """() => { const g = document.querySelector('#nl-curves .js-plotly-plot');
  if (!g || !g.data) return -1; return g.data.reduce((n, t) => n + (t.x ? t.x.length : 0), 0); }"""
CHIPS = "#lab-runs .run-chip"


def field(page, name: str, probe: bool = False):
    kind = "lab-probe-field" if probe else "lab-field"
    return page.locator(f'[id*="{kind}"][id*=\'"{name}"\']')


def error_of(page, name: str):
    return page.locator(f'[id*="lab-error"][id*=\'"{name}"\']')


def wait_value(page, name: str, value: str) -> None:
    page.wait_for_function(
        """([name, value]) => {
        const el = [...document.querySelectorAll('[id*="lab-field"]')]
            .find(e => JSON.parse(e.id).field === name);
        return el && el.value === value; }""",
        arg=[name, value],
        timeout=10000,
    )


def _count_runs(server) -> int:
    return httpx.get(server.url + "/api/runs", params={"limit": 1}, timeout=10).json()["total"]


def test_lab_board_and_form_survive_navigation_and_reload(page, shot, server):
    page.goto(server.url + "/")
    lr = field(page, "lr")
    lr.fill("0.002")
    lr.press("Tab")
    steps = field(page, "steps")
    steps.fill("20000")  # still live when we come back (quiet_queue cancels them)
    steps.press("Tab")
    page.get_by_text("Sweep: several normalizers").click()
    page.locator("#lab-sweep-batch").fill("4, 16")
    page.get_by_role("button", name="Start sweep").click()
    page.wait_for_function(f"() => document.querySelectorAll('{CHIPS}').length === 4", timeout=20000)
    page.wait_for_function(f"() => ({POINTS_JS})() > 0", timeout=60000)

    page.locator(".nav").get_by_role("link", name="Runs").click()
    page.wait_for_selector("#runs-table", timeout=15000)
    page.locator(".nav").get_by_role("link", name="Lab").click()
    # the same board: its four runs, their curves still growing, and the form as it was left
    page.wait_for_function(f"() => document.querySelectorAll('{CHIPS}').length === 4", timeout=15000)
    page.wait_for_function(f"() => ({POINTS_JS})() > 0", timeout=15000)
    n = page.evaluate(POINTS_JS)
    page.wait_for_function(f"() => ({POINTS_JS})() > {n}", timeout=30000)
    assert field(page, "lr").input_value() == "0.002"
    assert page.locator("#lab-sweep-batch").input_value() == "4, 16"
    assert "runs=" in page.evaluate("() => location.href")
    shot(page, "lab-after-navigation")

    page.goto(server.url + "/")  # a bare "/" (the brand link, a typed address) and a reload
    page.wait_for_function(f"() => document.querySelectorAll('{CHIPS}').length === 4", timeout=15000)
    wait_value(page, "lr", "0.002")
    page.reload()
    page.wait_for_function(f"() => document.querySelectorAll('{CHIPS}').length === 4", timeout=15000)
    wait_value(page, "lr", "0.002")
    assert not page.errors, page.errors


def test_cleared_field_gets_a_message_and_limits_come_from_the_server(page, shot, server):
    fields = httpx.get(server.url + "/api/catalog", timeout=10).json()["fields"]
    limit = fields["steps"]["anyOf"][0]["maximum"]
    page.goto(server.url + "/")
    assert field(page, "steps").get_attribute("max") == str(limit)
    before = _count_runs(server)
    box = field(page, "batch_size")
    box.fill("")
    box.press("Tab")
    page.get_by_role("button", name="Start run").click()
    err = error_of(page, "batch_size")
    err.wait_for(state="visible", timeout=10000)
    assert "Required" in err.inner_text() and "4096" in err.inner_text()
    assert "Batch size" in page.locator("#lab-message").inner_text()
    # past the server's limit the browser hands the field over as empty: the message names the limit
    box.fill("8")
    steps = field(page, "steps")
    steps.fill(str(limit * 10))
    steps.press("Tab")
    page.get_by_role("button", name="Start run").click()
    page.wait_for_function(
        """limit => [...document.querySelectorAll('[id*="lab-error"]')]
        .some(e => JSON.parse(e.id).field === "steps" && e.textContent.includes(limit))""",
        arg=str(limit),
        timeout=10000,
    )
    assert _count_runs(server) == before, "a run started from a form with an empty field"
    shot(page, "lab-cleared-field")


def test_presentation_mode_shows_the_board_without_the_builder(page, shot, server):
    page.goto(server.url + "/?present=1")
    page.wait_for_function("() => document.body.classList.contains('present')")
    page.locator("#nl-curves").wait_for(state="visible", timeout=15000)  # the board: results only
    assert not page.get_by_role("button", name="Start run").is_visible()
    assert not field(page, "batch_size").is_visible()
    shot(page, "lab-present")


def test_run_log_panel_shows_the_fisher_budget_warning(page, shot, server):
    # a budget far too small for any Fisher estimate: the run ends with a warning that says so
    r = httpx.post(
        server.url + "/api/runs",
        json={"task": "adding", "steps": 30, "probes": {"enabled": True, "budget": 0.001}},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    page.goto(f"{server.url}/run/{rid}")
    first = page.locator("#run-log li").first
    page.wait_for_function(
        "() => { const li = document.querySelector('#run-log li');"
        " return li && li.classList.contains('warning'); }",
        timeout=90000,
    )
    assert "budget" in first.inner_text().lower()  # warnings come first
    warning = page.locator("#run-fisher-warning")
    warning.wait_for(state="visible", timeout=30000)  # the probe panels follow the log panel's update
    assert "budget" in warning.inner_text().lower()
    shot(page, "run-log-budget-warning")
    # the way out: the same run set up in the Lab with the budget the warning names
    needed = re.search(r"raise it to ([0-9.]+) ?%", warning.inner_text())
    assert needed, warning.inner_text()
    page.locator("#run-fisher-retry a").click()
    page.wait_for_selector("#lab-probe-box", state="visible", timeout=15000)
    wait_value(page, "steps", "30")
    assert field(page, "budget", probe=True).input_value() == needed.group(1)
    assert page.locator("#lab-task").inner_text().strip().startswith("adding")


def test_lab_probe_settings_start_an_ln_lstm_whose_fisher_is_drawn_live(page, shot, server):
    page.goto(server.url + "/")
    before = page.locator("#lab-task-help").text_content()
    page.locator("#lab-task").click()
    page.get_by_role("option", name="adding", exact=True).click()
    # the task's answer rewrites the form (the probes switch included): tick it only after that answer
    page.wait_for_function(
        "(was) => document.querySelector('#lab-task-help').textContent !== was", arg=before
    )
    field(page, "probes").get_by_text("record hidden-state").click()
    box = page.locator("#lab-probe-box")
    box.wait_for(state="visible")
    assert field(page, "budget", probe=True).input_value() == "15"
    assert field(page, "fisher_every", probe=True).get_attribute("min") is not None
    steps = field(page, "steps")
    steps.fill("20000")  # long: the estimate must come while it trains (quiet_queue cancels it)
    steps.press("Tab")
    page.get_by_role("button", name="Start run").click()
    page.wait_for_selector(CHIPS, timeout=20000)
    rid = page.locator(f"{CHIPS} a").first.get_attribute("href").rsplit("/", 1)[-1]
    spec = httpx.get(f"{server.url}/api/runs/{rid}", timeout=10).json()["spec"]
    assert spec["task"] == "adding" and spec["norm"] == "layer" and spec["probes"]["enabled"]
    assert spec["probes"]["budget"] == pytest.approx(0.15)
    page.goto(f"{server.url}/run/{rid}")
    page.wait_for_function(
        """rid => { const g = document.querySelector('#run-fisher .js-plotly-plot');
           const drawn = g && g.data && g.data.some(t => t.y && t.y.some(v => v !== null));
           if (drawn) { window.__fisherWhile = (window.normlabStream.status || {})[rid] || 'running'; }
           return drawn; }""",
        arg=rid,
        timeout=240000,
    )
    assert page.evaluate("() => window.__fisherWhile") == "running", "drawn only after the run ended"
    shot(page, "run-lstm-fisher-live")
