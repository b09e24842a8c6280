"""`normlab bench client`: the Python client's full-resolution download against the raw CSV export, and
the embed pages' weight and paint beside the dashboard's Run page, against a real `normlab up`.

The 20,000-step history is written straight into the lab's store (the download path is measured, not
training); the pages show a short trained run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.pages import _median_dict, _page_load
from benchmarks.service import running_lab
from normlab.headless import CHROMIUM, CHROMIUM_ARGS

EMBED_READY = (
    "window.normlabEmbed && window.normlabEmbed.ready && document.querySelector('#panel-loss .main-svg')"
)
RUN_READY = "document.querySelector('#nl-curves .js-plotly-plot .main-svg') !== null"


def write_history(store, steps: int, special: dict[int, dict] | None = None) -> str:
    """A completed run with `steps` scalars events (one per step) written straight into the store; the
    values of `special` ({index: {metric: value}}) override the generated ones (NaN, infinities)."""
    import uuid

    from sqlalchemy import update

    from normlab.store import EventRow
    from normlab.store.schema import runs
    from normlab_client.spec import RunSpec

    run_id = uuid.uuid4().hex[:12]
    spec = RunSpec(task="digits", steps=steps, hidden_size=16).resolved().model_dump(mode="json")
    store.create_runs([{"id": run_id, "spec": spec}])
    t0 = 1.7e9
    rows = []
    for i in range(steps):
        values = {
            "train_loss": 2.0 / (1 + i) + (i % 7) * 1e-9,
            "val_loss": (1.5 / (1 + i)) if i % 50 == 0 else None,
            "accuracy": (i % 1000) / 1000 if i % 50 == 0 else None,
            "grad_norm": 0.1 + (i % 13) / 3,
            "lr": 1e-3,
            "steps_per_s": 1000.0 + i % 17,
            "elapsed": i / 1000.0,
        }
        values.update((special or {}).get(i, {}))
        rows.append(EventRow(i + 1, i + 1, "scalars", t0 + i / 1000.0 + 1e-7 * (i % 3), json.dumps(values)))
    rows.append(EventRow(steps + 1, steps, "status", t0 + steps, json.dumps({"status": "completed"})))
    for k in range(0, len(rows), 5000):
        chunk = rows[k : k + 5000]
        store.append_events(run_id, chunk, [], sum(r.kind == "scalars" for r in chunk))
    with store.engine.begin() as conn:
        conn.execute(
            update(runs).where(runs.c.id == run_id).values(status="completed", finished_at=time.time())
        )
    return run_id


def download(lab, run_id: str, repeats: int) -> dict:
    import pandas as pd

    from normlab_client import Client

    client_s, export_s, rows = [], [], 0
    with Client(lab.url) as c:
        run = c.run(run_id)
        for _ in range(repeats):
            t = time.perf_counter()
            rows = len(run.metrics())
            client_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            text = httpx.get(lab.api(f"api/runs/{run_id}/export"), params={"format": "csv"}, timeout=120).text
            assert len(pd.read_csv(io.StringIO(text))) == rows
            export_s.append(time.perf_counter() - t)
    c_med, e_med = statistics.median(client_s), statistics.median(export_s)
    return {
        "rows": rows,
        "client_rows_per_s": rows / c_med,
        "export_rows_per_s": rows / e_med,
        "client_over_export": e_med / c_med,  # > 1: the client is faster
    }


def pages(lab, run_ids: list[str], repeats: int) -> dict:
    if not os.path.exists(CHROMIUM):
        return {"skipped": f"{CHROMIUM} is missing"}
    from playwright.sync_api import sync_playwright

    targets = {
        "embed_run": (f"/embed/run/{run_ids[0]}", EMBED_READY),
        "embed_replay": (f"/embed/replay?runs={','.join(run_ids)}", EMBED_READY),
        "dashboard_run": (f"/run/{run_ids[0]}", RUN_READY),
    }
    out: dict = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for name, (path, ready) in targets.items():
            rows = []
            for _ in range(repeats):
                context = browser.new_context(viewport={"width": 1200, "height": 500})
                rows.append(_page_load(context, lab.url, path, ready))
                context.close()
            out[name] = _median_dict(rows)
        browser.close()
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="normlab bench client")
    ap.add_argument("--steps", type=int, default=20_000, help="scalars events in the downloaded history")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from normlab.store import Store
    from normlab_client import Client

    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp, running_lab(Path(tmp), workers=1) as lab:
        store = Store(f"sqlite:///{Path(tmp) / 'normlab.sqlite'}")
        run_id = write_history(store, args.steps)
        result: dict = {"download": download(lab, run_id, args.repeats), "load": os.getloadavg()[0]}
        with Client(lab.url) as c:
            g = c.sweep(task="digits", steps=300, hidden_size=16, eval_every=25, norms=["layer", "none"])
            g.wait(progress=False, timeout=600)
        result["pages"] = pages(lab, g.run_ids, args.repeats)
        result["load_after"] = os.getloadavg()[0]
        store.dispose()
    if args.json:
        print(json.dumps(result, indent=2))
    d = result["download"]
    print(f"metrics download, {d['rows']} rows (1-min load {result['load']:.1f}):")
    print(f"  client Run.metrics()      {d['client_rows_per_s']:>12,.0f} rows/s")
    print(f"  raw CSV export + read_csv {d['export_rows_per_s']:>12,.0f} rows/s")
    print(f"  client ÷ export speed     {d['client_over_export']:>12.2f}")
    print("pages (median; wire = bytes on the wire, first visit):")
    for name, m in result["pages"].items():
        if "skipped" in m or name == "skipped":
            print(f"  {name}: skipped")
            continue
        print(
            f"  {name:14} wire {m['wire_bytes'] / 1024:8.0f} KiB  body {m['body_bytes'] / 1024:8.0f} KiB  "
            f"requests {m['requests']:3.0f}  first paint {m['fcp_ms'] or 0:7.0f} ms  "
            f"chart drawn {m['meaningful_ms']:7.0f} ms"
        )
    return 0
