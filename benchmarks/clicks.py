"""What a click on the Lab costs in headless Chromium, the browser part of `normlab bench demo`: from the
click on "Start run" to the first training point drawn on the curves graph, and the page's main-thread
long tasks (PerformanceObserver 'longtask', > 50 ms each) in that window. `hog()` keeps one busy process
per core while a measurement runs, as a talk's laptop is busy too."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import statistics
from collections.abc import Iterator

import httpx

from normlab.headless import CHROMIUM, CHROMIUM_ARGS

POINTS = """() => { const g = document.querySelector('#nl-curves .js-plotly-plot');
  if (!g || !g.data) return 0; return g.data.reduce((n, t) => n + (t.x ? t.x.length : 0), 0); }"""
LONG_TASKS = """() => { window.__nlLong = []; new PerformanceObserver(l => l.getEntries().forEach(
  e => window.__nlLong.push([e.startTime, e.duration]))).observe({type: 'longtask', buffered: true}); }"""
FIELD = "[id*='lab-field'][id*='\"steps\"']"


def _spin() -> None:  # pragma: no cover - runs in the hog's processes
    while True:
        pass


@contextlib.contextmanager
def hog(on: bool) -> Iterator[None]:
    """One busy process per core for the duration (nothing when `on` is False)."""
    procs = []
    if on:
        for _ in range(os.cpu_count() or 1):
            p = multiprocessing.Process(target=_spin, daemon=True)
            p.start()
            procs.append(p)
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
            p.join(5)


def _one_click(browser, url: str) -> dict:
    context = browser.new_context(viewport={"width": 1400, "height": 950})
    page = context.new_page()
    try:
        page.goto(url.rstrip("/") + "/?runs=")
        page.wait_for_selector(FIELD, timeout=60000)
        page.wait_for_load_state("networkidle")
        page.evaluate(LONG_TASKS)
        page.fill(FIELD, "2000")
        page.press(FIELD, "Tab")
        start = page.evaluate("() => performance.now()")
        page.get_by_role("button", name="Start run").click()
        page.wait_for_function(f"() => ({POINTS})() > 0", timeout=120000)
        drawn = page.evaluate("() => performance.now()")
        long_ms = page.evaluate(
            f"() => window.__nlLong.filter(([t]) => t >= {start} && t <= {drawn})"
            ".reduce((s, [, d]) => s + d, 0)"
        )
        return {"first_point_s": (drawn - start) / 1000, "long_tasks_ms": long_ms}
    finally:
        context.close()
        items = httpx.get(url.rstrip("/") + "/api/runs", params={"status": "running"}, timeout=10).json()
        for r in items.get("items", []):
            httpx.post(url.rstrip("/") + f"/api/runs/{r['id']}/cancel", timeout=10)


def clicks(url: str, repeats: int) -> dict:
    """{"first_point_s": median, "long_tasks_ms": median, "each": [...]} over `repeats` fresh tabs."""
    if not os.path.exists(CHROMIUM):
        return {"skipped": f"{CHROMIUM} is missing"}
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        each = [_one_click(browser, url) for _ in range(repeats)]
        browser.close()
    return {
        "first_point_s": statistics.median(e["first_point_s"] for e in each),
        "long_tasks_ms": statistics.median(e["long_tasks_ms"] for e in each),
        "each": each,
    }
