"""`normlab bench demo [--json] [--baseline DIR]`: what a speaker on stage feels, on a real `normlab up`
(temporary data directory, free port, one worker), measured over HTTP as the browser sees it:

- start-up: process start -> /api/health answers (the URL is printed then);
- click -> first point: POST /api/runs -> the first `scalars` event on the run's SSE stream, for the
  first run after start and the median of --repeats more (each cancelled once it has its point);
- click -> first point with every worker on batch work: the one worker trains a sweep's long run
  (batch work) when the click comes; the sweep's run yields (backend/yields.py), beside the quiet median;
- with --hog, also the first run after start on a `normlab up` started under a CPU hog per core (the
  click comes as soon as the address answers, while the worker still warms: workers/warm.py);
- cancel latency: POST /api/runs/{id}/cancel -> the `cancelled` status event on the SSE stream, with the
  run queued (behind a training one), setting up (cancelled as soon as its `running` event arrives; the
  phase it was really in is reported: scalars seen before the cancel or not) and training;
- Chromium click: "Start run" on the Lab -> the first training point drawn on its graph, and the main
  thread's long tasks in between (benchmarks/clicks.py); with --hog also under one busy process per core;
- page weight: bytes on the wire for every request a page makes (as served: compressed or not), on a
  first visit (empty cache) and a repeat visit (the browser's cache), and the uncompressed size; first
  contentful paint and first meaningful paint (the Lab's form drawn) in headless Chromium
  (benchmarks/pages.py).

With --baseline DIR (a checkout of another revision, e.g. `git archive main | tar -x -C DIR`) the same
measurements run first on a `normlab up` from DIR, and the table puts both side by side with ratios.
--first-points measures only the click -> first point rows (after start, quiet, batch work; with --hog
the first run after start under the hog too), without the cancels, pages and Chromium.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from benchmarks.clicks import clicks, hog
from benchmarks.pages import pages
from benchmarks.service import iter_sse, running_lab
from normlab_client.events import TERMINAL_STATUSES

TARGETS = {
    "first_point_median_s": 1.0,
    "first_point_after_start_s": 1.5,
    "first_point_batch_busy_s": 3.0,
    "first_point_after_start_hog_s": 6.0,
    "cancel_s": 1.0,
    "meaningful_paint_ms": 1000.0,
}
RUN = {"task": "digits", "norm": "layer", "batch_size": 4}  # issue 19's "LN bs 4" run
LONG = {**RUN, "steps": 20000}


class Watch:
    """A thread following one run's SSE stream; records (arrival time, kind, status) per event."""

    def __init__(self, url: str, run_id: str):
        self.events: list[tuple[float, str, str | None]] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(url, run_id), daemon=True)
        self._thread.start()

    def _read(self, url: str, run_id: str) -> None:
        with httpx.Client() as client:
            try:
                for m in iter_sse(client, f"{url}api/runs/{run_id}/events", timeout=300):
                    status = m.json()["payload"].get("status") if m.event == "status" else None
                    with self._cond:
                        self.events.append((time.perf_counter(), m.event, status))
                        self._cond.notify_all()
            except (httpx.HTTPError, TimeoutError):
                pass
        with self._cond:
            self.events.append((time.perf_counter(), "end", None))
            self._cond.notify_all()

    def wait(self, kind: str, status: str | None = None, timeout: float = 120.0) -> float:
        """Arrival time of the first event of this kind (and status), waiting for it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for t, k, s in self.events:
                    if k == kind and (status is None or s == status):
                        return t
                    if k == "end":
                        raise RuntimeError(f"the stream ended before a {kind} {status or ''} event")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {kind} {status or ''} event within {timeout} s")
                self._cond.wait(left)

    def wait_end(self, timeout: float = 120.0) -> tuple[float, str | None]:
        """(arrival time, status) of the run's terminal status event; (time, None) if the stream ended
        without one."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for t, k, s in self.events:
                    if (k == "status" and s in TERMINAL_STATUSES) or k == "end":
                        return t, s
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the run did not end within {timeout} s")
                self._cond.wait(left)

    def count(self, kind: str, before: float) -> int:
        with self._cond:
            return sum(1 for t, k, _ in self.events if k == kind and t <= before)


def _submit(url: str, spec: dict) -> tuple[str, float, Watch]:
    t0 = time.perf_counter()
    r = httpx.post(url + "api/runs", json=spec, timeout=30)
    r.raise_for_status()
    run_id = r.json()["id"]
    return run_id, t0, Watch(url, run_id)


def _cancel(url: str, run_id: str, watch: Watch) -> float | None:
    """Seconds from the cancel request to the `cancelled` event; None if the run ended otherwise."""
    t0 = time.perf_counter()
    httpx.post(f"{url}api/runs/{run_id}/cancel", timeout=30).raise_for_status()
    t, status = watch.wait_end(timeout=120)
    if status != "cancelled":
        print(f"bench demo: run {run_id} ended {status!r} after the cancel request", file=sys.stderr)
        return None
    return t - t0


def first_point(url: str) -> float:
    """Seconds from POST to the first scalars event; the run is then cancelled and waited for."""
    run_id, t0, watch = _submit(url, RUN)
    took = watch.wait("scalars", timeout=120) - t0
    _cancel(url, run_id, watch)
    return took


def first_point_behind_batch(url: str, repeats: int) -> list[float]:
    """Click -> first point while the one worker trains a sweep's long run (batch work), per repeat;
    the sweep's run is cancelled after each."""
    out = []
    for _ in range(repeats):
        r = httpx.post(url + "api/sweeps", json={"base": LONG, "norms": ["layer"]}, timeout=30)
        r.raise_for_status()
        batch = r.json()["run_ids"][0]
        watch = Watch(url, batch)
        watch.wait("scalars", timeout=120)
        out.append(first_point(url))
        _cancel(url, batch, watch)
    return out


def cancel_latencies(url: str, repeats: int) -> dict:
    out: dict[str, list] = {
        "queued": [],
        "setting_up": [],
        "training": [],
        "setting_up_had_scalars": [],
        "errors": [],
    }
    for _ in range(repeats):
        try:
            a, _, wa = _submit(url, LONG)
            wa.wait("scalars")
            b, _, wb = _submit(url, LONG)  # the one worker is busy: b stays queued
            out["queued"].append(_cancel(url, b, wb))
            out["training"].append(_cancel(url, a, wa))
            c, _, wc = _submit(url, LONG)
            wc.wait("status", "running")
            sent = time.perf_counter()
            out["setting_up"].append(_cancel(url, c, wc))
            out["setting_up_had_scalars"].append(wc.count("scalars", sent) > 0)
        except (TimeoutError, RuntimeError) as exc:  # a stuck worker: say so, measure the rest
            out["errors"].append(str(exc))
            print(f"bench demo: {exc}", file=sys.stderr)
            break
    return out


def first_after_start(pythonpath: str | None, loaded: bool) -> tuple[float, float]:
    """(start-up, click -> first point) of the first run on a `normlab up` started now (under a CPU hog
    per core with `loaded`), clicked as soon as its address answers."""
    with tempfile.TemporaryDirectory(prefix="nl-bench-demo-") as tmp, hog(loaded):
        t0 = time.perf_counter()
        with running_lab(
            tmp, workers=1, timeout=180, isolated=True, pythonpath=pythonpath, wait_warm=False
        ) as lab:
            return time.perf_counter() - t0, first_point(lab.url)


def _first_points(url: str, startup: float, repeats: int) -> dict:
    """On a `normlab up` just started (`startup` s ago): its first run's first point, then `repeats`
    quiet ones and `repeats` with every worker on batch work."""
    first = first_point(url)
    more = [first_point(url) for _ in range(repeats)]
    return {
        "startup_s": startup,
        "first_point_after_start_s": first,
        "first_point_median_s": statistics.median(more),
        "first_point_s": more,
        "first_point_batch_busy_s": first_point_behind_batch(url, repeats),
    }


def measure_first_points(pythonpath: str | None, repeats: int, loaded: bool = False) -> dict:
    """Only the click -> first point figures (--first-points): after start, quiet, on batch work."""
    with tempfile.TemporaryDirectory(prefix="nl-bench-demo-") as tmp:
        t0 = time.perf_counter()
        with running_lab(
            tmp, workers=1, timeout=180, isolated=True, pythonpath=pythonpath, wait_warm=False
        ) as lab:
            out = _first_points(lab.url, time.perf_counter() - t0, repeats)
    out["code"] = pythonpath or "this checkout"
    if loaded:
        out["startup_hog_s"], out["first_point_after_start_hog_s"] = first_after_start(pythonpath, True)
    return out


def measure(
    pythonpath: str | None, repeats: int, cancel_repeats: int, page_repeats: int, loaded: bool = False
) -> dict:
    """Every figure on one `normlab up` started now (its code from `pythonpath` when given); with
    `loaded`, the Chromium click figures are also taken with a CPU hog per core."""
    with tempfile.TemporaryDirectory(prefix="nl-bench-demo-") as tmp:
        t0 = time.perf_counter()
        with running_lab(
            tmp, workers=1, timeout=180, isolated=True, pythonpath=pythonpath, wait_warm=False
        ) as lab:
            points = _first_points(lab.url, time.perf_counter() - t0, repeats)
            cancels = cancel_latencies(lab.url, cancel_repeats)
            weight = pages(lab.url, page_repeats)
            browser_clicks = clicks(lab.url, max(1, repeats))
            with hog(loaded):
                hogged = clicks(lab.url, max(1, repeats)) if loaded else None
    return {
        "clicks": browser_clicks,
        "clicks_hog": hogged,
        **points,
        "cancel_s": cancels,
        "pages": weight,
        "code": pythonpath or "this checkout",
    }


def _fmt(v, digits=2, unit="") -> str:
    return "—" if v is None else f"{v:.{digits}f}{unit}"


def rows(res: dict) -> list[tuple[str, float | None, float | None]]:
    """(figure, value, target) rows of one measurement."""
    out: list[tuple[str, float | None, float | None]] = [
        ("start-up: launch -> API answers (s)", res["startup_s"], None),
        (
            "click -> first point, first run after start (s)",
            res["first_point_after_start_s"],
            TARGETS["first_point_after_start_s"],
        ),
        ("click -> first point, median (s)", res["first_point_median_s"], TARGETS["first_point_median_s"]),
    ]
    if res.get("first_point_batch_busy_s"):  # (a baseline older than yields has none)
        out.append(
            (
                "click -> first point, every worker on batch work, median (s)",
                statistics.median(res["first_point_batch_busy_s"]),
                TARGETS["first_point_batch_busy_s"],
            )
        )
    if "first_point_after_start_hog_s" in res:
        out.append(
            (
                "click -> first point, first run after start, a CPU hog per core (s)",
                res["first_point_after_start_hog_s"],
                TARGETS["first_point_after_start_hog_s"],
            )
        )
    if "cancel_s" not in res:  # --first-points
        return out
    c = res["cancel_s"]
    for phase in ("queued", "setting_up", "training"):
        ok = [v for v in c[phase] if v is not None]  # None: the run ended otherwise (see stderr)
        out.append(
            (
                f"cancel -> cancelled, {phase.replace('_', ' ')}, median (s)",
                statistics.median(ok) if ok else None,
                TARGETS["cancel_s"],
            )
        )
        out.append(
            (
                f"cancel -> cancelled, {phase.replace('_', ' ')}, worst (s)",
                max(ok) if ok else None,
                TARGETS["cancel_s"],
            )
        )
    for key, label in (("clicks", ""), ("clicks_hog", ", a CPU hog per core")):
        c = res.get(key) or {}
        if "first_point_s" in c:
            out.append((f"Chromium: click -> first point drawn{label} (s)", c["first_point_s"], None))
            out.append(
                (f"Chromium: main-thread long tasks after a click{label} (ms)", c["long_tasks_ms"], None)
            )
    for name, r in res["pages"].items() if "skipped" not in res["pages"] else ():
        for visit in ("first", "repeat"):
            v = r[visit]
            out.append((f"{name} page, {visit} visit: bytes on the wire (kB)", v["wire_bytes"] / 1000, None))
            out.append(
                (
                    f"{name} page, {visit} visit: first meaningful paint (ms)",
                    v["meaningful_ms"],
                    TARGETS["meaningful_paint_ms"],
                )
            )
            out.append((f"{name} page, {visit} visit: first contentful paint (ms)", v["fcp_ms"], None))
        out.append((f"{name} page: uncompressed bytes (kB)", r["first"]["body_bytes"] / 1000, None))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="normlab bench demo", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--repeats", type=int, default=5, help="runs for the click -> first point median")
    p.add_argument("--cancel-repeats", type=int, default=3, help="cancels per phase")
    p.add_argument("--page-repeats", type=int, default=3, help="page loads per page and visit")
    p.add_argument("--baseline", default=None, help="a checkout of another revision to measure first")
    p.add_argument(
        "--hog",
        action="store_true",
        help="also time the Chromium clicks (--first-points: the first run after start) under a hog per core",
    )
    p.add_argument("--first-points", action="store_true", help="only the click -> first point rows")
    args = p.parse_args(argv)
    results: dict = {"load_before": os.getloadavg()}

    def arm(pythonpath: str | None) -> dict:
        if args.first_points:
            return measure_first_points(pythonpath, args.repeats, args.hog)
        return measure(pythonpath, args.repeats, args.cancel_repeats, args.page_repeats, args.hog)

    if args.baseline:
        results["baseline"] = arm(str(Path(args.baseline).resolve()))
    results["current"] = arm(None)
    results["load_after"] = os.getloadavg()
    results["targets"] = TARGETS
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    cur = rows(results["current"])
    base = rows(results["baseline"]) if "baseline" in results else None
    head = f"{'figure':<58}" + (f"{'baseline':>10}" if base else "") + f"{'current':>10}{'target':>9}"
    print(head + (f"{'ratio':>8}" if base else ""))
    for i, (name, value, target) in enumerate(cur):
        line = f"{name:<58}"
        if base:
            line += f"{_fmt(base[i][1]):>10}"
        line += f"{_fmt(value):>10}{_fmt(target, 1) if target else '':>9}"
        before = base[i][1] if base else None
        if before and value:
            line += f"{before / value:>7.1f}×"
        print(line)
    print("ratio = baseline ÷ current (above 1: current is faster / lighter).")
    print(
        "load average when the measurement began / ended: "
        + " ".join(f"{x:.1f}" for x in results["load_before"])
        + " / "
        + " ".join(f"{x:.1f}" for x in results["load_after"])
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
