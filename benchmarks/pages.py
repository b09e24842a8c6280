"""Page weight and paint of normlab's pages in headless Chromium, the page part of `normlab bench demo`:
bytes on the wire for every request a page makes (as served: compressed or not) on a first visit (empty
cache) and a repeat visit (the browser's cache), the uncompressed size, and first contentful paint and
first meaningful paint (the page's own content drawn)."""

from __future__ import annotations

import os
import statistics

from normlab.headless import CHROMIUM, CHROMIUM_ARGS

PAGES = {
    "lab": (
        "/",
        "document.querySelector('.builder .field-grid input') !== null && "
        "document.querySelector('#nl-curves .js-plotly-plot .main-svg') !== null",
    ),
    "runs": ("/runs", "document.querySelector('#runs-table') !== null"),
}
FCP_JS = "() => (performance.getEntriesByName('first-contentful-paint')[0] || {startTime: null}).startTime"


def _page_load(context, url: str, path: str, ready: str) -> dict:
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    wire: dict[str, float] = {}
    body: dict[str, int] = {}
    cached = [0]
    cdp.on("Network.loadingFinished", lambda e: wire.__setitem__(e["requestId"], e["encodedDataLength"]))
    cdp.on(
        "Network.dataReceived",
        lambda e: body.__setitem__(e["requestId"], body.get(e["requestId"], 0) + e["dataLength"]),
    )
    cdp.on("Network.requestServedFromCache", lambda e: cached.__setitem__(0, cached[0] + 1))
    page.goto(url.rstrip("/") + path)
    page.wait_for_function(f"() => {ready}", timeout=60000)
    meaningful = page.evaluate("() => performance.now()")
    fcp = page.evaluate(FCP_JS)
    page.wait_for_load_state("networkidle")
    page.close()
    return {
        "wire_bytes": int(sum(wire.values())),
        "body_bytes": int(sum(body.values())),
        "requests": len(wire),
        "from_cache": cached[0],
        "meaningful_ms": meaningful,
        "fcp_ms": fcp,
    }


def pages(url: str, repeats: int) -> dict:
    if not os.path.exists(CHROMIUM):
        return {"skipped": f"{CHROMIUM} is missing"}
    from playwright.sync_api import sync_playwright

    out: dict = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for name, (path, ready) in PAGES.items():
            first, repeat = [], []
            for _ in range(repeats):
                context = browser.new_context(viewport={"width": 1400, "height": 950})
                first.append(_page_load(context, url, path, ready))  # empty cache
                repeat.append(_page_load(context, url, path, ready))  # the same browser, cache warm
                context.close()
            out[name] = {"first": _median_dict(first), "repeat": _median_dict(repeat)}
        browser.close()
    return out


def _median_dict(rows: list[dict]) -> dict:
    return {
        k: (statistics.median(r[k] for r in rows) if all(r[k] is not None for r in rows) else None)
        for k in rows[0]
    }
