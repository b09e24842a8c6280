"""Every page as an audience sees it, in a real headless Chromium against `normlab up`: the Lab, a Run with
probes (live and ended), Compare, Presets, Runs, Invariance and the /embed pages, at 1280×720 and
1920×1080, normal and presentation mode. Fails on two texts of one figure that overlap (titles, axis
titles, legends, colour-bar titles, annotations), on a form control shown in presentation mode (the one
control to leave it excepted), on a "recorded no"/"no data" text while a run's data are still coming
(watched from the page's first paint), and on any console error. Screenshots of every view land in the
test's tmp folder (printed). One browser and one server for the module; short runs on tiny tasks."""

from __future__ import annotations

import httpx
import pytest

from tests.frontend._page_checks import CONTROLS, DRAWN, OVERLAPS

pytestmark = [pytest.mark.browser]

VIEWPORTS = ((1280, 720), (1920, 1080))
PROBES = {"enabled": True, "trace_every": 5, "fisher_every": 10}

# Installed before any page script: remembers every false-empty text the page ever showed.
WATCH_EMPTY = """
(() => {
  window.__emptySeen = [];
  const look = () => {
    const root = document.body;
    if (!root) { return; }
    const text = root.textContent || "";
    for (const m of text.matchAll(/[^.]{0,60}(recorded no|no data)[^.]{0,60}/gi)) {
      if (!window.__emptySeen.includes(m[0])) { window.__emptySeen.push(m[0]); }
    }
  };
  setInterval(look, 50);
})();
"""


def _submit(server, **spec) -> str:
    r = httpx.post(server.url + "/api/runs", json=spec, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _wait_status(server, run_id: str, wanted: tuple[str, ...], timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = httpx.get(f"{server.url}/api/runs/{run_id}", timeout=10).json()["status"]
        if status in wanted:
            return
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} not {wanted} within {timeout} s")


@pytest.fixture(scope="module")
def runs(server):
    """An ended probe run, an ended digits run, and a probe run that trains through the module."""
    small = {"task": "adding", "seq_len": 12, "hidden_size": 16, "eval_every": 10}
    ended = _submit(server, **small, steps=40, probes=PROBES)
    digits = _submit(server, task="digits", norm="batch", batch_size=16, steps=60, eval_every=20)
    _wait_status(server, digits, ("completed",))
    live = _submit(server, **small, steps=20_000, probes=PROBES)
    _wait_status(server, live, ("running",))
    yield {"ended": ended, "digits": digits, "live": live}
    httpx.post(f"{server.url}/api/runs/{live}/cancel", timeout=10)


def _pages(runs) -> list[tuple[str, str]]:
    """(name, path) of every page."""
    live, ended, digits = runs["live"], runs["ended"], runs["digits"]
    return [
        ("lab", f"/?runs={live},{digits}"),  # the board: a live run and an ended one
        ("run-live", f"/run/{live}"),
        ("run-ended", f"/run/{ended}"),
        ("compare", f"/compare?runs={ended},{digits},{live}"),
        ("presets", "/presets"),
        ("runs", "/runs"),
        ("invariance", "/invariance"),
        ("embed-run", f"/embed/run/{live}?panels=loss,val,hidden,fisher"),
        ("embed-compare", f"/embed/compare?runs={ended},{digits}"),
        ("embed-replay", f"/embed/replay?runs={ended},{digits}"),
    ]


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=lambda v: f"{v[0]}x{v[1]}")
def test_every_page_reads_cleanly_in_both_modes(browser, server, runs, viewport, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"views-{viewport[0]}x{viewport[1]}")
    print(f"\nscreenshots: {folder}")
    problems: list[str] = []
    for present in (False, True):
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        context.add_init_script(WATCH_EMPTY)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
        try:
            for name, path in _pages(runs):
                where = f"{name} {viewport[0]}x{viewport[1]}{' present' if present else ''}"
                url = server.url + path + (("&" if "?" in path else "?") + "present=1" if present else "")
                page.goto(url)
                page.wait_for_function(DRAWN, timeout=60000)
                if name.startswith("run-"):  # the probe panels' first data
                    page.wait_for_function(
                        "() => { const gd = document.querySelector('#run-hidden .js-plotly-plot');"
                        " return gd && gd.data.some(t => t.type === 'heatmap'); }",
                        timeout=60000,
                    )
                page.wait_for_timeout(300)  # one redraw after the last data (not a proof of absence)
                page.screenshot(
                    path=str(folder / f"{name}{'-present' if present else ''}.png"), full_page=True
                )
                problems += [f"{where}: overlap {o}" for o in page.evaluate(OVERLAPS)]
                if present:
                    problems += [f"{where}: control {c}" for c in page.evaluate(CONTROLS)]
                seen = page.evaluate("() => window.__emptySeen")
                problems += [f"{where}: said '{s.strip()}' before its data were in" for s in seen]
                problems += [f"{where}: console {e}" for e in errors]
                errors.clear()
        finally:
            context.close()
    assert not problems, "\n".join(problems)


def test_embeds_fit_a_small_frame_and_say_when_a_panel_has_no_data(browser, server, runs, tmp_path_factory):
    folder = tmp_path_factory.mktemp("views-embed-small")
    print(f"\nscreenshots: {folder}")
    context = browser.new_context(viewport={"width": 480, "height": 300})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    ready = "() => window.normlabEmbed && window.normlabEmbed.ready"
    try:
        # a replay with its bar, in a 480×300 frame: every chart whole, above the bar
        page.goto(f"{server.url}/embed/replay?runs={runs['ended']},{runs['digits']}&panels=loss,val")
        page.wait_for_function(ready, timeout=30000)
        page.screenshot(path=str(folder / "replay-480x300.png"))
        boxes = page.evaluate(
            "() => ({bar: document.getElementById('bar').getBoundingClientRect().top, panels:"
            " Array.from(document.querySelectorAll('.panel')).map(p => p.getBoundingClientRect().bottom)})"
        )
        assert boxes["panels"] and all(bottom <= boxes["bar"] + 1 for bottom in boxes["panels"]), boxes
        # probe panels of a run without probes say so; validation drawn as measured (one trace, opaque)
        page.goto(f"{server.url}/embed/run/{runs['digits']}?panels=val,hidden,fisher&smoothing=0.6")
        page.wait_for_function(ready, timeout=30000)
        page.screenshot(path=str(folder / "no-probes-480x300.png"))
        for panel in ("hidden", "fisher"):
            text = page.evaluate(f"() => document.getElementById('panel-{panel}').textContent")
            assert "probes were off" in text, (panel, text)
        val = page.evaluate("() => document.getElementById('panel-val').data.map(t => t.opacity)")
        assert val == [1], val
        assert not errors, errors
    finally:
        context.close()
