"""`normlab bench frontend [--json]`: what the dashboard costs in a real headless Chromium.

1. First meaningful paint of each page: navigation start → the page's main content drawn (the curves
   with their traces, the runs table rows, Table 1, the preset gallery); also the browser's own
   first-contentful-paint. Median of --repeats loads.
2. Live appends with 8 runs streaming on one Compare page (one EventSource, 100 ms append tick), side
   by side with the same page idle: main-thread busy fraction (Chrome's TaskDuration), frames per second,
   points appended per second, and main-thread milliseconds per appended point and per redraw.

The API is the synthetic one (benchmarks.devapi, same routes and event shapes as backend/), so the
numbers are the front end's alone, at a controlled event rate, not the trainer's speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import httpx

from normlab.headless import CHROMIUM, CHROMIUM_ARGS
from normlab_client.events import RunStatus

READY = {  # page -> JS condition meaning "its main content is drawn"
    "lab": "document.querySelector('.builder .field-grid input') !== null",
    "runs": "document.querySelectorAll('#runs-table tbody tr td').length > 0",
    "compare": "(() => { const g = document.querySelector('#nl-curves .js-plotly-plot');"
    " return g && g.data && g.data.length >= 8 && g.querySelector('.scatterlayer .trace'); })()",
    "run": "(() => { const g = document.querySelector('#nl-curves .js-plotly-plot');"
    " return g && g.data && g.data.length && g.querySelector('.scatterlayer .trace'); })()",
    "invariance": "document.querySelectorAll('.paper-cell').length === 18",
    "presets": "document.querySelectorAll('.preset').length > 0",
}
FCP_JS = "() => (performance.getEntriesByName('first-contentful-paint')[0] || {startTime: null}).startTime"


def _serve(rate: float):
    import socket

    import uvicorn

    from benchmarks.devapi import DevAPI

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api = DevAPI(rate=rate)
    server = uvicorn.Server(
        uvicorn.Config(api.app, host="127.0.0.1", port=port, log_level="error", timeout_graceful_shutdown=1)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            httpx.get(url + "/api/health", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    return url, server, thread


def _start(url: str, n: int, steps: int) -> list[str]:
    norms = ["layer", "batch", "none", "rms", "weight", "layer", "batch", "none"]
    return [
        httpx.post(
            url + "/api/runs",
            json={"task": "digits", "norm": norms[i % 8], "seed": i, "batch_size": 32, "steps": steps},
        ).json()["id"]
        for i in range(n)
    ]


def _wait_done(url: str, ids: list[str], timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(httpx.get(f"{url}/api/runs/{r}").json()["status"] == RunStatus.COMPLETED for r in ids):
            return
        time.sleep(0.5)


def _paint(page, url: str, name: str) -> tuple[float, float | None]:
    page.goto("about:blank")
    page.goto(url)
    page.wait_for_function(f"() => {READY[name]}", timeout=60000)
    ready = page.evaluate("() => performance.now()")
    return ready, page.evaluate(FCP_JS)


def _metrics(cdp) -> dict:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def _window(page, cdp, seconds: float) -> dict:
    """Main-thread time, frames and appended points over `seconds` of wall time."""
    page.evaluate(
        "() => { window.__frames = 0; const f = () => { window.__frames++; "
        "window.__raf = requestAnimationFrame(f); }; f(); }"
    )
    c0 = page.evaluate("() => [normlabStream.appended, normlabStream.extends]")
    m0, t0 = _metrics(cdp), time.perf_counter()
    page.wait_for_timeout(seconds * 1000)
    m1, t1 = _metrics(cdp), time.perf_counter()
    c1 = page.evaluate("() => [normlabStream.appended, normlabStream.extends]")
    frames = page.evaluate("() => { cancelAnimationFrame(window.__raf); return window.__frames; }")
    wall = t1 - t0
    busy = m1["TaskDuration"] - m0["TaskDuration"]
    points, extends = c1[0] - c0[0], c1[1] - c0[1]

    def frac(key):
        return (m1[key] - m0[key]) / wall

    return {
        "wall_s": wall,
        "busy_fraction": busy / wall,
        "script_fraction": frac("ScriptDuration"),
        "layout_fraction": frac("LayoutDuration"),
        "style_fraction": frac("RecalcStyleDuration"),
        "fps": frames / wall,
        "points_per_s": points / wall,
        "redraws_per_s": extends / wall,
        "ms_per_point": 1000 * busy / points if points else None,
        "ms_per_redraw": 1000 * busy / extends if extends else None,
    }


def measure(
    repeats: int = 3,
    rate: float = 20.0,
    window: float = 6.0,
    panels: str = "loss,val,metric",
    pages_too: bool = True,
) -> dict:
    from playwright.sync_api import sync_playwright

    url, server, thread = _serve(rate)
    try:
        done = _start(url, 8, 200)
        _wait_done(url, done)
        pages = {
            "lab": "/",
            "runs": "/runs",
            "compare": f"/compare?panels={panels}&runs=" + ",".join(done),
            "run": f"/run/{done[0]}",
            "invariance": "/invariance",
            "presets": "/presets",
        }
        out: dict = {"pages": {}, "live": {}, "rate_per_run": rate, "runs": 8}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 950})
            for name, path in pages.items() if pages_too else ():
                _paint(page, url + path, name)  # warm-up: assets cached as a returning visitor has them
                samples = [_paint(page, url + path, name) for _ in range(repeats)]
                fcps = [f for _, f in samples if f is not None]
                out["pages"][name] = {
                    "meaningful_ms": statistics.median(s for s, _ in samples),
                    "fcp_ms": statistics.median(fcps) if fcps else None,
                }
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            page.goto(url + pages["compare"])
            page.wait_for_function(f"() => {READY['compare']}")
            out["live"]["idle"] = _window(page, cdp, window)
            live = _start(url, 8, 4000)
            page.goto(url + f"/compare?panels={panels}&runs=" + ",".join(live))
            page.wait_for_function("() => normlabStream.appended > 50", timeout=30000)
            out["live"]["streaming"] = _window(page, cdp, window)
            page.evaluate("() => { normlabStream.adaptive = false; }")  # fixed 100 ms tick, same stream
            out["live"]["streaming_fixed_tick"] = _window(page, cdp, window)
            out["live"]["points_in_graph"] = page.evaluate(
                "() => document.querySelector('#nl-curves .js-plotly-plot').data"
                ".reduce((n, t) => n + t.x.length, 0)"
            )
            browser.close()
        return out
    finally:
        server.should_exit = True
        thread.join(5)


def _fmt(v, unit="", digits=1):
    return "—" if v is None else f"{v:.{digits}f}{unit}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="normlab bench frontend", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rate", type=float, default=20.0, help="scalars events per second per live run")
    p.add_argument("--window", type=float, default=6.0, help="seconds measured, idle and streaming")
    p.add_argument("--panels", default="loss,val,metric", help="Compare panels shown while streaming")
    p.add_argument("--live-only", action="store_true", help="skip the page-load measurements")
    args = p.parse_args(argv)
    import os

    if not os.path.exists(CHROMIUM):
        print(f"normlab bench frontend: {CHROMIUM} is missing (apt-get install chromium)")
        return 2
    res = measure(args.repeats, args.rate, args.window, args.panels, not args.live_only)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"First meaningful paint (median of {args.repeats} loads, warm cache)")
    print(f"{'page':<12}{'meaningful':>12}{'FCP':>10}")
    for name, r in res["pages"].items():
        print(f"{name:<12}{_fmt(r['meaningful_ms'], ' ms', 0):>12}{_fmt(r['fcp_ms'], ' ms', 0):>10}")
    idle, live, fixed = res["live"]["idle"], res["live"]["streaming"], res["live"]["streaming_fixed_tick"]
    print(
        f"\nCompare page ({args.panels}), 8 runs, {args.rate:g} events/s each: idle, streaming "
        "(adaptive throttle), streaming (fixed 100 ms tick)"
    )
    for key, label, d in (
        ("busy_fraction", "main thread busy", 3),
        ("script_fraction", "  of it script", 3),
        ("layout_fraction", "  of it layout", 3),
        ("style_fraction", "  of it style", 3),
        ("fps", "frames / s", 1),
        ("points_per_s", "points appended / s", 0),
        ("redraws_per_s", "redraws / s", 1),
        ("ms_per_point", "ms main thread / point", 3),
        ("ms_per_redraw", "ms main thread / redraw", 2),
    ):
        print(
            f"{label:<26}{_fmt(idle[key], '', d):>10}{_fmt(live[key], '', d):>12}"
            f"{_fmt(fixed[key], '', d):>12}"
        )
    ratio = live["busy_fraction"] / idle["busy_fraction"] if idle["busy_fraction"] else None
    print(f"{'busy ratio streaming/idle':<26}{'':>10}{_fmt(ratio, '×', 1):>12}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
