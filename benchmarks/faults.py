"""`normlab bench faults [--json]`: load and fault figures of the shared lab server, measured on a real
`normlab api` (NORMLAB_AUTH=tokens, public reading) with real `normlab worker` processes on loopback:

- queue: N short runs (≈ 1 s) from two users over W workers: finished, lost, trained twice, FIFO per user;
- viewers: V concurrent SSE viewers of one live run: p95 latency, lost and duplicated events;
- lost: a worker SIGKILLed mid-run -> seconds until the run is `lost` (with this server's settings).

Every loop is bounded and stops by itself; nothing leaves loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time

import httpx

from benchmarks.service import bench_service, start_api, start_worker, stop_process
from normlab_client.events import TERMINAL_STATUSES, RunStatus

TARGETS = {
    "queue_lost": 0,
    "queue_twice": 0,
    "queue_fifo_violations": 0,
    "viewers_p95_ms": 1000,
    "viewers_lost": 0,
    "lost_detect_s": 30,
}
TINY = {"task": "digits", "steps": 5, "hidden_size": 16, "eval_every": 5}
# The queue's runs: short, but longer than a worker's take-to-claim time (message taken -> a fresh pool
# child -> the claim written): one run's end to the same worker's next claim took 0.0–1.0 s on the 2-core
# VM under 3 busy loops, where these runs took 0.6–1.5 s. FIFO is read from the runs' claim times; with
# 5-step runs (0.15 s) one slow worker could let the other claim two later runs of the same user first,
# a "violation" of an order the broker had kept (CI, once).
QUEUED = {"task": "digits", "steps": 300, "hidden_size": 16, "eval_every": 300}


def queue_load(
    url: str,
    users: dict[str, dict],
    n_runs: int,
    workers: int,
    timeout: float = 1800.0,
    spec: dict | None = None,
) -> dict:
    """Submit n_runs tiny runs round-robin over `users` ({name: headers}), wait for all, and check:
    every run finished once (one `running` status event, one terminal), none lost, FIFO per user
    (a run may start before an earlier one of the same user only within the `workers` runs that are
    handed out at the same time)."""
    spec = spec or QUEUED
    names = list(users)
    submitted: dict[str, list[str]] = {n: [] for n in names}
    with httpx.Client(timeout=30) as c:
        t0 = time.monotonic()
        for i in range(n_runs):
            who = names[i % len(names)]
            r = c.post(url + "api/runs", json={**spec, "seed": i}, headers=users[who])
            r.raise_for_status()
            submitted[who].append(r.json()["id"])
        submit_s = time.monotonic() - t0
        ids = [rid for n in names for rid in submitted[n]]
        runs: dict[str, dict] = {}
        deadline = time.monotonic() + timeout
        while len(runs) < len(ids) and time.monotonic() < deadline:
            page = c.get(url + "api/runs", params={"limit": 500, "offset": 0}).json()["items"]
            for run in page:
                if run["id"] in ids and run["status"] in TERMINAL_STATUSES:
                    runs[run["id"]] = run
            if len(runs) < len(ids):
                time.sleep(0.5)
        wall_s = time.monotonic() - t0
        twice = 0
        for rid in runs:
            export = c.get(url + f"api/runs/{rid}/export", params={"format": "json"}).json()
            statuses = [e["payload"]["status"] for e in export["events"] if e["kind"] == "status"]
            twice += (
                statuses.count(RunStatus.RUNNING) > 1
                or len([s for s in statuses if s in TERMINAL_STATUSES]) > 1
            )
    fifo_violations = 0
    for name in names:
        started = [runs[r]["started_at"] for r in submitted[name] if r in runs and runs[r]["started_at"]]
        order = sorted(range(len(started)), key=lambda k: started[k])
        fifo_violations += sum(abs(rank - k) > max(0, workers - 1) for rank, k in enumerate(order))
    statuses = [r["status"] for r in runs.values()]
    return {
        "runs": n_runs,
        "users": len(names),
        "workers": workers,
        "completed": statuses.count(RunStatus.COMPLETED),
        "not_finished": len(ids) - len(runs),
        "failed_or_lost": sum(s != "completed" for s in statuses),
        "twice": twice,
        "fifo_violations": fifo_violations,
        "submit_s": round(submit_s, 2),
        "wall_s": round(wall_s, 1),
        "runs_per_min": round(60 * len(runs) / wall_s, 1) if wall_s else None,
    }


def lost_detection(url: str, headers: dict, timeout: float = 120.0) -> dict:
    """Start a long run, SIGKILL the process group of the worker that trains it (the Celery parent
    and its pool child) mid-run, and time until the run reads `lost`."""
    with httpx.Client(timeout=30) as c:
        rid = c.post(
            url + "api/runs", json={**TINY, "steps": 20000, "eval_every": 1000}, headers=headers
        ).json()["id"]
        deadline = time.monotonic() + timeout
        run = c.get(url + f"api/runs/{rid}").json()
        while run["last_seq"] < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
            run = c.get(url + f"api/runs/{rid}").json()
        child_pid = int(run["worker_host"].rsplit(":", 1)[1])  # "host:pid" of the pool child
        os.killpg(os.getpgid(child_pid), signal.SIGKILL)
        t_kill = time.monotonic()
        while (
            c.get(url + f"api/runs/{rid}").json()["status"] != RunStatus.LOST and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        run = c.get(url + f"api/runs/{rid}").json()
        resubmitted = c.post(url + f"api/runs/{rid}/resubmit", headers=headers).status_code
    return {
        "status": run["status"],
        "detect_s": round(time.monotonic() - t_kill, 1),
        "events_kept": run["last_seq"],
        "resubmit_status": resubmitted,
    }


def run_bench(args) -> dict:
    from backend.auth import TokenStore
    from benchmarks.stream import measure_feed

    limits = {
        "auth": "tokens",
        "public_read": True,
        "max_active_runs_per_user": max(20, args.runs),
        "submit_rate_per_minute": 10_000,
        "max_streams_per_client": 100_000,  # the viewers all come from this one address
    }
    with bench_service(args.form, "nlfaults", args.pg_url, args.redis_url, **limits) as svc:
        tokens = TokenStore(svc.store)
        users = {n: {"Authorization": f"Bearer {tokens.create(n)[1]}"} for n in ("ada", "grace")}
        workers = [start_worker(svc.data_dir, svc.env, f"w{i}") for i in range(args.workers)]
        url, api = start_api(svc.data_dir, svc.env)
        out: dict = {"form": args.form}
        try:
            if args.runs:
                out["queue"] = queue_load(url, users, args.runs, args.workers)
            if args.viewers:
                out["viewers"] = measure_feed(
                    url, svc.store, svc.publisher, args.viewers, args.events, args.rate
                )
            if args.lost:
                out["lost"] = lost_detection(url, users["ada"])
            return out
        finally:
            stop_process(api, timeout=10)
            for w in workers:
                stop_process(w, signal.SIGKILL, timeout=5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="normlab bench faults", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--form", choices=["redis", "embedded"], default="redis")
    p.add_argument("--runs", type=int, default=100, help="tiny runs queued at once (0 = skip)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--viewers", type=int, default=500, help="concurrent SSE viewers (0 = skip)")
    p.add_argument("--events", type=int, default=100, help="events of the viewed run")
    p.add_argument("--rate", type=float, default=10.0, help="its events per second")
    p.add_argument("--no-lost", dest="lost", action="store_false", help="skip the SIGKILL measurement")
    p.add_argument(
        "--chaos",
        action="store_true",
        help="instead: the faults mixed while runs stream "
        "(benchmarks/chaos.py; its own redis-server and PostgreSQL schema)",
    )
    p.add_argument("--chaos-runs", type=int, default=10, help="short runs queued during the chaos run")
    p.add_argument("--timeout", type=float, default=300.0, help="the chaos run stops by itself after this")
    p.add_argument("--pg-url", default="postgresql://127.0.0.1:5432/test")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    args = p.parse_args(argv)
    if args.chaos:
        from benchmarks.chaos import TARGETS as CHAOS_TARGETS
        from benchmarks.chaos import run_chaos

        if not 2 <= args.chaos_runs <= 50 or not 60 <= args.timeout <= 1800:
            p.error("keep it bounded: 2-50 chaos runs, a timeout of 60-1800 s")
        chaos = run_chaos(args.pg_url, args.chaos_runs, args.timeout)
        if args.json:
            print(json.dumps({"results": {"chaos": chaos}, "targets": CHAOS_TARGETS}))
        else:
            print_chaos(chaos)
        return 0
    if args.runs > 1000 or args.viewers > 1000 or not 1 <= args.workers <= 8 or args.events > 10_000:
        p.error("keep it bounded: at most 1000 runs, 1000 viewers, 1-8 workers, 10000 events")
    report = {
        "results": run_bench(args),
        "targets": TARGETS,
        "args": {k: v for k, v in vars(args).items() if k != "json"},
    }
    if args.json:
        print(json.dumps(report))
    else:
        print_table(report["results"])
    return 0


def print_table(r: dict) -> None:
    print(f"normlab bench faults ({r['form']} form)")
    if "queue" in r:
        q = r["queue"]
        print(
            f"  {q['runs']} runs / {q['users']} users / {q['workers']} workers: "
            f"{q['completed']} completed, {q['not_finished']} not finished, "
            f"{q['failed_or_lost']} failed or lost, {q['twice']} twice, "
            f"{q['fifo_violations']} FIFO violations; {q['wall_s']} s ({q['runs_per_min']} runs/min)"
        )
    if "viewers" in r:
        v = r["viewers"]
        print(
            f"  {v['clients']} SSE viewers x {v['events']} events: p50 {v['p50_ms']} ms, "
            f"p95 {v['p95_ms']} ms, max {v['max_ms']} ms, lost {v['lost']}, duplicates {v['duplicates']}"
        )
    if "lost" in r:
        lo = r["lost"]
        print(
            f"  SIGKILLed worker: run {lo['status']} after {lo['detect_s']} s, {lo['events_kept']} events "
            f"kept, resubmit -> HTTP {lo['resubmit_status']}"
        )


def print_chaos(c: dict) -> None:
    print("normlab bench faults --chaos (Redis broker + feed, PostgreSQL, 2 workers, a viewer per run)")
    print(f"  faults: {'; '.join(c['faults'])}")
    print(
        f"  runs: {c['runs_submitted']} submitted, {c['completed']} completed, {c['lost']} lost "
        f"(the SIGKILLed worker's), {c['falsely_lost']} falsely lost, {c['cancelled']} cancelled, "
        f"{c['not_finished']} not finished (stranded), {c['run_twice']} run twice"
    )
    print(
        f"  intervention flood: {c['intervention_flood']}; 5xx other than 503: {c['server_errors_5xx']} "
        f"(run list polled {c['list_answers']} times)"
    )
    print(f"  events: {c['events_emitted']} emitted, {c['events_stored']} stored, {c['lost_events']} lost")
    print(f"  viewers: {c['viewers']}, {c['incomplete_viewers']} incomplete (a gap, a duplicate or a hang)")
    print(
        f"  longest wait of a queued run with a worker free: {c['max_wait_with_free_worker_s']} s "
        f"(target < 30 s), {c['max_wait_outside_db_outages_s']} s not counting the database outages; "
        f"wall {c['wall_s']} s"
    )
    print(
        f"  cancel storm: {c['storm_cancelled']} cancelled; /api/health: p95 "
        f"{c['health_p95_during_faults_s']} s during faults (target ≤ 5 s), max {c['health_max_s']} s, "
        f"{c['health_non_200']} of "
        f"{c['health_samples']} not 200 ({c['health_no_answer']} unanswered)"
    )
