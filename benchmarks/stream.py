"""`normlab bench stream [--json]`: the live feed measured side by side for the Redis (+PostgreSQL) and
embedded (SQLite) forms, each with a real `normlab api` and `normlab worker` on loopback:

- latency: worker event -> SSE client (p50/p95), one client;
- fan-out: N clients on one run: p95 latency, lost and duplicated events;
- submit -> first event with an idle worker (real Celery worker, real engine, tiny run);
- history: fetching a 1,000,000-point run downsampled to 2,000 points.

The "worker" of the latency and fan-out runs is the worker's own `EventWriter` driven at a fixed rate
from this process (benchmarks/worker.py), so the rate is controlled; submit -> first event uses the real
worker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import threading
import time
from typing import Any

import httpx

from benchmarks.service import bench_service, iter_sse, start_api, start_worker, stop_process
from benchmarks.worker import emit_synthetic, new_running_run, write_history

TARGETS = {
    "latency_p95_ms_redis": 250,
    "fanout_p95_ms": 1000,
    "fanout_lost": 0,
    "submit_first_event_s": 2.0,
    "history_ms": 300,
}
_SEQ = re.compile(rb'"seq":(\d+)')
_TIME = re.compile(rb'"time":([0-9.eE+-]+)')


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


# ---- a cheap SSE client (HTTP/1.0: no chunked framing), many per event loop -------------------------
async def sse_client(
    host: str, port: int, path: str, out: dict, ready: asyncio.Event, n_ready: list, n_total: int
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode())
    await writer.drain()
    buf = b""
    seqs, lat = out["seqs"], out["lat"]
    started = False
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            break
        now = time.time()
        buf += chunk
        *frames, buf = buf.split(b"\r\n\r\n")
        for frame in frames:
            if not started and b"retry:" in frame:
                started = True
                n_ready[0] += 1
                if n_ready[0] == n_total:
                    ready.set()
            m, sent = _SEQ.search(frame), _TIME.search(frame)
            if m and sent:
                seqs.append(int(m.group(1)))
                lat.append(now - float(sent.group(1)))
                if b'"status":"completed"' in frame:
                    writer.close()
                    return
    writer.close()


def measure_feed(base: str, store, publisher, n_clients: int, n_events: int, rate_hz: float) -> dict:
    """n_clients SSE clients on one synthetic run: latency percentiles, lost and duplicate counts."""
    run_id, watch = new_running_run(store)
    host, port = base.split("//")[1].rstrip("/").split(":")
    outs: list[dict[str, list]] = [{"seqs": [], "lat": []} for _ in range(n_clients)]

    async def main():
        ready = asyncio.Event()
        n_ready = [0]
        tasks = [
            asyncio.create_task(
                sse_client(host, int(port), f"/api/runs/{run_id}/events", o, ready, n_ready, n_clients)
            )
            for o in outs
        ]
        await asyncio.wait_for(ready.wait(), 120)
        emitter = threading.Thread(target=emit_synthetic, args=(store, run_id, publisher, n_events, rate_hz))
        emitter.start()
        await asyncio.wait_for(asyncio.gather(*tasks), n_events / rate_hz + 120)
        emitter.join()

    asyncio.run(main())
    watch.stop()
    expected = n_events + 2
    lost = sum(len(set(range(1, expected + 1)) - set(o["seqs"])) for o in outs)
    dups = sum(len(o["seqs"]) - len(set(o["seqs"])) for o in outs)
    lat = [x * 1000 for o in outs for x in o["lat"]]
    return {
        "clients": n_clients,
        "events": expected,
        "rate_hz": rate_hz,
        "p50_ms": round(pct(lat, 50), 1),
        "p95_ms": round(pct(lat, 95), 1),
        "max_ms": round(max(lat), 1),
        "lost": lost,
        "duplicates": dups,
    }


def measure_submit(base: str, reps: int) -> dict:
    """POST a tiny real run to an idle worker; time until its first event arrives over SSE."""
    spec = {"task": "digits", "steps": 5, "hidden_size": 16}
    out = []
    with httpx.Client(timeout=120) as c:
        warm = c.post(base + "api/runs", json=spec).json()["id"]  # the worker's first run warms it up
        list(iter_sse(c, base + f"api/runs/{warm}/events", timeout=300))
        for _ in range(reps):
            # Idle: a fresh pool child (one per run, so CUDA memory is released) has replaced the last one.
            time.sleep(4.0)
            t0 = time.time()
            rid = c.post(base + "api/runs", json=spec).json()["id"]
            first = next(iter_sse(c, base + f"api/runs/{rid}/events", timeout=120))
            out.append(time.time() - t0)
            assert first.json()["seq"] == 1
            list(iter_sse(c, base + f"api/runs/{rid}/events", headers={"Last-Event-ID": "1"}, timeout=300))
    return {"reps": reps, "median_s": round(statistics.median(out), 3), "max_s": round(max(out), 3)}


def measure_history(base: str, store, n_points: int, max_points: int, reps: int = 5) -> dict:
    run_id, write_s = write_history(store, n_points)
    times = []
    with httpx.Client(timeout=120) as c:
        for _ in range(reps):
            t0 = time.perf_counter()
            r = c.get(base + f"api/runs/{run_id}/metrics", params={"max_points": max_points})
            times.append((time.perf_counter() - t0) * 1000)
            body = r.json()
    n_out = len(body["series"]["train_loss"]["step"])
    assert body["total_points"] == n_points and max(body["series"]["train_loss"]["max"]) == 5.0
    return {
        "points": n_points,
        "max_points": max_points,
        "buckets": n_out,
        "write_s": round(write_s, 1),
        "median_ms": round(statistics.median(times), 1),
        "max_ms": round(max(times), 1),
    }


TRAINING = {"task": "digits", "steps": 20000, "hidden_size": 256, "eval_every": 500}


@contextlib.contextmanager
def training(base: str):
    """A long run trained by the real worker meanwhile (waits until it is running; cancelled after)."""
    with httpx.Client(timeout=30) as c:
        run_id = c.post(base + "api/runs", json=TRAINING).json()["id"]
        deadline = time.monotonic() + 120
        while c.get(base + f"api/runs/{run_id}").json()["status"] != "running":
            if time.monotonic() > deadline:
                raise RuntimeError("the training run did not start within 120 s")
            time.sleep(0.2)
        try:
            yield run_id
        finally:
            c.post(base + f"api/runs/{run_id}/cancel")


def run_form(form: str, args) -> dict:
    # the viewers all come from this one address
    with bench_service(form, "nlbench", args.pg_url, args.redis_url, max_streams_per_client=100_000) as svc:
        worker = start_worker(svc.data_dir, svc.env, "bench")
        base, api = start_api(svc.data_dir, svc.env)
        try:
            result: dict[str, Any] = {
                "submit_first_event": measure_submit(base, args.submit_reps),
                "latency": measure_feed(base, svc.store, svc.publisher, 1, args.events, args.rate),
            }
            result["fanout"] = [
                measure_feed(base, svc.store, svc.publisher, n, args.events, args.rate) for n in args.clients
            ]
            if args.train_load:  # the same fan-out while the worker trains a run on the same cores
                with training(base):
                    result["fanout_training"] = [
                        measure_feed(base, svc.store, svc.publisher, n, args.events, args.rate)
                        for n in args.clients
                    ]
            result["history"] = measure_history(base, svc.store, args.history_points, 2000)
            return result
        finally:
            stop_process(api, timeout=10)
            stop_process(worker, timeout=10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="normlab bench stream", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--forms", default="redis,embedded")
    p.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")], default=[100, 500])
    p.add_argument("--events", type=int, default=100, help="events per fan-out run")
    p.add_argument("--rate", type=float, default=10.0, help="events per second")
    p.add_argument("--submit-reps", type=int, default=3)
    p.add_argument(
        "--train-load", action="store_true", help="also measure fan-out while the worker trains a run"
    )
    p.add_argument("--history-points", type=int, default=1_000_000)
    p.add_argument("--pg-url", default="postgresql://127.0.0.1:5432/test")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    args = p.parse_args(argv)
    if max(args.clients) > 1000 or args.events > 10_000 or args.history_points > 5_000_000:
        p.error("keep it bounded: at most 1000 clients, 10000 events, 5000000 history points")
    results = {form: run_form(form, args) for form in args.forms.split(",")}
    report = {
        "forms": results,
        "targets": TARGETS,
        "args": {k: v for k, v in vars(args).items() if k not in ("json",)},
    }
    if args.json:
        print(json.dumps(report))
    else:
        print_table(results)
    return 0


def print_table(results: dict) -> None:
    forms = list(results)
    rows = [
        (
            "worker event -> SSE p50 / p95 (ms)",
            [f"{r['latency']['p50_ms']} / {r['latency']['p95_ms']}" for r in results.values()],
        )
    ]
    for i, fan in enumerate(next(iter(results.values()))["fanout"]):
        rows.append(
            (
                f"{fan['clients']} clients: p95 ms / lost / dup",
                [
                    f"{f['p95_ms']} / {f['lost']} / {f['duplicates']}"
                    for f in (r["fanout"][i] for r in results.values())
                ],
            )
        )
    rows.append(
        (
            "submit -> first event median / max (s)",
            [
                f"{r['submit_first_event']['median_s']} / {r['submit_first_event']['max_s']}"
                for r in results.values()
            ],
        )
    )
    for i, fan in enumerate(next(iter(results.values())).get("fanout_training", [])):
        rows.append(
            (
                f"{fan['clients']} clients, worker training: p95 ms / lost / dup",
                [
                    f"{f['p95_ms']} / {f['lost']} / {f['duplicates']}"
                    for f in (r["fanout_training"][i] for r in results.values())
                ],
            )
        )
    h = next(iter(results.values()))["history"]
    rows.append(
        (
            f"history {h['points']:,} -> {h['max_points']:,} pts median / max (ms)",
            [f"{r['history']['median_ms']} / {r['history']['max_ms']}" for r in results.values()],
        )
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'':{width}}  " + "  ".join(f"{f:>22}" for f in forms))
    for label, vals in rows:
        print(f"{label:{width}}  " + "  ".join(f"{v:>22}" for v in vals))
