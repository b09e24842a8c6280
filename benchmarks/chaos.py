"""`normlab bench faults --chaos`: the faults mixed while runs stream, on a real Redis/PostgreSQL stack
started here (its own redis-server on a free port, its own PostgreSQL schema reached through a proxy
that can cut it or go silent), an API and two workers. While runs of both users train and every run
has a live SSE viewer, it takes PostgreSQL away, makes it silent (connections open, nothing answered),
submits and cancels a storm of runs, floods a running run with interventions, SIGKILLs a worker
mid-run (and starts another), restarts Redis, and kills a process holding a queued run's message;
/api/health and the run list are polled throughout. It reports runs submitted / completed / lost (and
falsely lost: lost although its worker was not killed) / run twice / not finished, 5xx answers other
than the outages' 503, events stored vs emitted, viewer gaps, the longest time queued runs waited with
a worker free, and health's latency during the faults. Bounded: it stops by itself within `--timeout`
seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx

from benchmarks.service import iter_sse, start_api, start_worker, stop_process
from benchmarks.service_faults import RedisServer, TCPProxy
from normlab_client.events import TERMINAL_STATUSES

TARGETS = {
    "lost_events": 0,
    "run_twice": 0,
    "not_finished": 0,
    "max_wait_with_free_worker_s": 30,
    "incomplete_viewers": 0,
    "health_p95_during_faults_s": 5,
    "falsely_lost": 0,
    "server_errors_5xx": 0,
}
SILENT_S = 12  # longer than every store deadline: only deadlines end the calls it holds
STORM = 40  # runs submitted and cancelled at once
FLOOD = 130  # interventions at once on one running run (its cap is 100, the rate 60 a minute)
SHORT = {"task": "digits", "steps": 600, "hidden_size": 16, "eval_every": 100}
LONG = {"task": "digits", "steps": 20000, "hidden_size": 16, "eval_every": 1000}
HOLDER = (
    "from normlab.queue import make_celery\nfrom normlab.settings import Settings\n"
    "s = Settings()\nwith make_celery(s).connection_for_read() as c:\n"
    "    m = c.SimpleQueue(s.queue, no_ack=False).get(timeout=60)\n"
    "    print('holding', flush=True)\n    import time; time.sleep(600)\n"
)


def run_chaos(pg_base: str, n_runs: int, timeout: float) -> dict:
    import psycopg

    from benchmarks.service import service_env

    data_dir = Path(f"/tmp/nlchaos-{uuid.uuid4().hex[:8]}")
    data_dir.mkdir(parents=True)
    schema = f"nlchaos_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    port = int(pg_base.rsplit(":", 1)[1].split("/")[0])
    proxy, redis = TCPProxy(port), RedisServer()
    proxy.start()
    redis.up()
    db = (
        f"postgresql+psycopg://127.0.0.1:{proxy.port}/{pg_base.rsplit('/', 1)[1]}"
        f"?options=-csearch_path%3D{schema}&connect_timeout=2"
    )
    env = service_env(
        data_dir,
        queue=f"nlchaos-{uuid.uuid4().hex[:6]}",
        database_url=db,
        broker_url=redis.url,
        redis_url=redis.url,
        lost_after_s=6,
        worker_heartbeat_s=1,
        submit_rate_per_minute=10_000,
        max_streams_per_client=100_000,  # the viewers all come from this one address
    )
    workers = [start_worker(data_dir, env, f"w{i}") for i in range(2)]
    url, api = start_api(data_dir, env)
    alive = [(time.time(), 2)]  # (since, workers alive)
    faults: list[tuple[float, str]] = []
    viewers: dict[str, list[int]] = {}
    threads: list[threading.Thread] = []
    killed: dict[str, float] = {}  # run id -> when its worker was killed
    health: list[tuple[float, float, int]] = []  # (when, seconds, status; 0 = no answer)
    outages: list[tuple[float, float]] = []  # while the database was away or silent: nobody can claim
    t0 = time.monotonic()

    listed: list[int] = []  # GET /api/runs status codes (0 = no answer)

    def poll_health() -> None:
        with httpx.Client(timeout=30) as c:
            while time.monotonic() < t0 + timeout and not done.is_set():
                start = time.monotonic()
                try:
                    code = c.get(url + "api/health").status_code
                except httpx.HTTPError:
                    code = 0
                health.append((time.time(), time.monotonic() - start, code))
                try:  # the run list, which one unreadable run used to take down for everyone
                    listed.append(c.get(url + "api/runs").status_code)
                except httpx.HTTPError:
                    listed.append(0)
                time.sleep(0.25)

    done = threading.Event()
    threading.Thread(target=poll_health, daemon=True).start()

    def view(run_id: str) -> None:
        """A viewer as a browser's EventSource is: it reconnects after an error with Last-Event-ID."""
        seen = viewers.setdefault(run_id, [])
        deadline = t0 + timeout
        with httpx.Client() as c:
            while time.monotonic() < deadline:
                headers = {"Last-Event-ID": str(seen[-1])} if seen else {}
                try:
                    ended = False
                    for m in iter_sse(
                        c,
                        url + f"api/runs/{run_id}/events",
                        headers=headers,
                        timeout=max(1.0, deadline - time.monotonic()),
                    ):
                        if m.id:
                            seen.append(int(m.id))
                        ended = m.event == "status" and m.json()["payload"]["status"] in TERMINAL_STATUSES
                    if ended:
                        return  # the stream ended after the terminal event; else reconnect
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code == 204:
                        return  # finished, nothing after our cursor
                except Exception:  # noqa: BLE001 - a dropped or refused connection: reconnect
                    pass
                time.sleep(1.0)

    def submit(c: httpx.Client, spec: dict, seed: int) -> str:
        for _ in range(100):  # the database may be away right now: a client retries a 503
            try:
                r = c.post(url + "api/runs", json={**spec, "seed": seed})
                if r.status_code == 201:
                    run_id = r.json()["id"]
                    threads.append(threading.Thread(target=view, args=(run_id,), daemon=True))
                    threads[-1].start()
                    return run_id
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError("could not submit")

    ids: list[str] = []
    flood: dict[str, int] = {}
    try:
        with httpx.Client(timeout=30) as c:
            ids += [submit(c, LONG, 0), submit(c, LONG, 1)]  # both workers busy, then a queue behind
            ids += [submit(c, SHORT, i) for i in range(2, 2 + n_runs // 2)]
            time.sleep(8)
            faults.append((time.time(), "postgresql away 8 s"))
            proxy.stop()
            time.sleep(8)
            proxy.start()
            outages.append((faults[-1][0], time.time()))
            time.sleep(10)  # apart, so that each outage's effect on the queue shows on its own
            faults.append((time.time(), f"postgresql silent {SILENT_S} s"))
            proxy.silence()
            time.sleep(SILENT_S)
            proxy.resume()
            outages.append((faults[-1][0], time.time()))
            time.sleep(3)
            faults.append((time.time(), f"{STORM} runs submitted and cancelled"))
            storm = _cancel_storm(c, url, STORM)
            flooded = _wait_running(c, url, ids[:2], 30)
            if flooded is not None:
                faults.append((time.time(), f"{FLOOD} interventions at once on a running run"))
                flood = _intervention_flood(url, flooded["id"], FLOOD)
            ids += [submit(c, SHORT, i) for i in range(100, 100 + n_runs - n_runs // 2)]
            time.sleep(5)
            victim = _wait_running(c, url, ids[:2], 30)
            if victim is not None:
                pid = int(victim["worker_host"].rsplit(":", 1)[1])
                faults.append((time.time(), "worker SIGKILLed mid-run"))
                os.killpg(os.getpgid(pid), signal.SIGKILL)
                killed[victim["id"]] = time.time()
                alive.append((time.time(), 1))
                time.sleep(3)
                workers.append(start_worker(data_dir, env, "w2"))
                alive.append((time.time() + 3, 2))  # a worker process takes ~3 s to start
            time.sleep(5)
            faults.append((time.time(), "redis restarted"))
            redis.down()
            time.sleep(1)
            redis.up()
            ids.append(submit(c, SHORT, 200))
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLDER],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            ids.append(submit(c, SHORT, 201))
            if holder.stdout is not None and holder.stdout.readline().startswith("holding"):
                faults.append((time.time(), "a process holding a queued run's message SIGKILLed"))
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
            for rid in ids[:2]:  # the long run that was not killed
                if rid not in killed:
                    c.post(url + f"api/runs/{rid}/cancel")
            runs = _wait_all(c, url, ids, t0 + timeout)
        for t in threads:
            t.join(max(1.0, t0 + timeout - time.monotonic()))
        done.set()
        return _report(
            c_url=url,
            ids=ids,
            runs=runs,
            viewers=viewers,
            alive=alive,
            killed=killed,
            faults=faults,
            wall_s=time.monotonic() - t0,
        ) | {
            "storm_cancelled": storm,
            "intervention_flood": flood,
            "falsely_lost": sum(runs.get(r, {}).get("status") == "lost" and r not in killed for r in ids),
            "server_errors_5xx": sum(500 <= code < 600 and code != 503 for code in listed)
            + sum(n for code, n in flood.items() if code.startswith("5") and code != "503"),
            "list_answers": len(listed),
            "max_wait_outside_db_outages_s": round(_max_wait(ids, runs, alive, killed, outages), 1),
            "longest_wait_after": _longest_wait_after(ids, runs, alive, killed, outages, faults),
            **_health_report(health, faults),
        }
    finally:
        stop_process(api, signal.SIGTERM, timeout=10)
        for w in workers:
            stop_process(w, signal.SIGKILL, timeout=5)
        redis.down()
        proxy.stop()
        with psycopg.connect(pg_base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _intervention_flood(url: str, run_id: str, n: int) -> dict[str, int]:
    """`n` interventions sent at once from 10 threads (a script gone wrong): answers counted by status."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> str:
        try:
            with httpx.Client(timeout=30) as c:
                body = {"lr": 0.001 + i * 1e-6}
                return str(c.post(url + f"api/runs/{run_id}/interventions", json=body).status_code)
        except httpx.HTTPError:
            return "no answer"

    with ThreadPoolExecutor(10) as pool:
        codes = list(pool.map(one, range(n)))
    return {code: codes.count(code) for code in sorted(set(codes))}


def _cancel_storm(c: httpx.Client, url: str, n: int) -> int:
    """Submit n short runs and cancel each at once (as a user changing their mind); how many ended
    cancelled."""
    cancelled = 0
    for i in range(n):
        try:
            r = c.post(url + "api/runs", json={**SHORT, "seed": 1000 + i})
            if r.status_code == 201:
                rid = r.json()["id"]
                cancelled += c.post(url + f"api/runs/{rid}/cancel").json().get("status") == "cancelled"
        except httpx.HTTPError:
            pass
    return cancelled


def _health_report(health: list[tuple[float, float, int]], faults: list[tuple[float, str]]) -> dict:
    """Health's latency while a fault was on (from each fault to 15 s after it), and overall."""

    def p95(xs: list[float]) -> float | None:
        return round(sorted(xs)[int(0.95 * (len(xs) - 1))], 2) if xs else None

    during = [s for t, s, _ in health if any(f <= t <= f + 15 for f, _ in faults)]
    return {
        "health_samples": len(health),
        "health_p95_during_faults_s": p95(during),
        "health_max_s": round(max((s for _, s, _ in health), default=0.0), 2),
        "health_p95_s": p95([s for _, s, _ in health]),
        "health_non_200": sum(code != 200 for _, _, code in health),
        "health_no_answer": sum(code == 0 for _, _, code in health),
    }


def _get(c: httpx.Client, url: str) -> dict | None:
    try:
        r = c.get(url)
        return r.json() if r.status_code == 200 else None
    except httpx.HTTPError:
        return None


def _wait_running(c: httpx.Client, url: str, ids: list[str], timeout: float) -> dict | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rid in ids:
            run = _get(c, url + f"api/runs/{rid}")
            if run is not None and run["status"] == "running" and run["worker_host"]:
                return run
        time.sleep(0.5)
    return None


def _wait_all(c: httpx.Client, url: str, ids: list[str], deadline: float) -> dict[str, dict]:
    runs: dict[str, dict] = {}
    while time.monotonic() < deadline:
        for rid in ids:
            run = _get(c, url + f"api/runs/{rid}")
            if run is not None:
                runs[rid] = run
        if all(runs.get(r, {}).get("status") in TERMINAL_STATUSES for r in ids):
            break
        time.sleep(1.0)
    return runs


def _ts(value) -> float | None:
    from datetime import datetime

    return datetime.fromisoformat(value).timestamp() if value else None


def _report(c_url: str, ids, runs, viewers, alive, killed, faults, wall_s: float) -> dict:
    statuses = [runs.get(r, {}).get("status", "unknown") for r in ids]
    twice = stored = emitted = 0
    with httpx.Client(timeout=60) as c:
        for rid in ids:
            export = c.get(c_url + f"api/runs/{rid}/export", params={"format": "json"}).json()
            seqs = [e["seq"] for e in export["events"]]
            stored += len(seqs)
            emitted += export["run"]["last_seq"]
            running = [
                e for e in export["events"] if e["kind"] == "status" and e["payload"]["status"] == "running"
            ]
            twice += len(running) > 1
    detail = {}
    for r in ids:
        seen, last = viewers.get(r, []), runs.get(r, {}).get("last_seq", 0)
        if seen != list(range(1, last + 1)):
            detail[r] = {
                "status": runs.get(r, {}).get("status"),
                "last_seq": last,
                "seen": len(seen),
                "missing": sorted(set(range(1, last + 1)) - set(seen))[:5],
                "duplicates": len(seen) - len(set(seen)),
            }
    incomplete = len(detail)
    return {
        "runs_submitted": len(ids),
        "completed": statuses.count("completed"),
        "lost": statuses.count("lost"),
        "cancelled": statuses.count("cancelled"),
        "not_finished": sum(s not in TERMINAL_STATUSES for s in statuses),
        "run_twice": twice,
        "events_emitted": emitted,
        "events_stored": stored,
        "lost_events": emitted - stored,
        "viewers": len(ids),
        "incomplete_viewers": incomplete,
        "incomplete_detail": detail,
        "max_wait_with_free_worker_s": round(_max_wait(ids, runs, alive, killed), 1),
        "faults": [f for _, f in faults],
        "wall_s": round(wall_s, 1),
    }


def _longest_wait_after(ids, runs, alive, killed, outages, faults) -> str:
    """Which fault the longest wait (outside the outages) came after, and how long after it began."""
    end: list[float] = []
    _max_wait(ids, runs, alive, killed, outages, end)
    if not end:
        return "none"
    before = [(t, f) for t, f in faults if t <= end[0]]
    return f"{before[-1][1]} (+{end[0] - before[-1][0]:.0f} s)" if before else "before any fault"


def _max_wait(ids, runs, alive, killed, outages=(), worst_end: list | None = None) -> float:
    """Longest stretch during which a run was queued while fewer runs were training than workers were
    alive (sampled every 0.1 s; a killed worker's run stops counting at the kill). Time inside
    `outages` (database away: no worker can claim) does not count, nor does it end a stretch."""
    inf = float("inf")
    spans: list[tuple[float, float]] = []
    queued: list[tuple[float, float]] = []
    for rid in ids:
        run = runs.get(rid)
        if run is None:
            continue
        created = _ts(run["created_at"]) or 0.0
        start, end = _ts(run.get("started_at")), _ts(run.get("finished_at"))
        if start is not None:
            spans.append((start, min(killed.get(rid, inf), end if end is not None else inf)))
        left = start if start is not None else end  # a queued run cancelled before it started
        queued.append((created, left if left is not None else time.time()))
    if not queued:
        return 0.0
    t, stop = min(a for a, _ in queued), max(b for _, b in queued)
    worst = current = 0.0
    while t < stop:
        workers = [n for since, n in alive if since <= t]
        training = sum(a <= t < b for a, b in spans)
        waiting = any(a <= t < b for a, b in queued)
        if any(a <= t < b for a, b in outages):
            t += 0.1
            continue
        current = current + 0.1 if waiting and training < (workers[-1] if workers else 0) else 0.0
        if current > worst and worst_end is not None:
            worst_end[:] = [t]
        worst = max(worst, current)
        t += 0.1
    return worst
