"""Faults, each with real processes: a SIGKILLed worker (lost, events kept, resubmit), Redis restarted
during runs (disposable redis-server), PostgreSQL briefly away (a TCP proxy cut and restored), a NaN loss.
Cancel within 1 s is tests/backend/test_e2e.py::test_cancel_running_within_one_second_and_queued_at_once."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from benchmarks.service import iter_sse, read_until_training
from normlab.settings import Settings

pytestmark = pytest.mark.slow
LONG = {"steps": 20000, "eval_every": 1000}


def test_killed_worker_lost_within_30s_events_kept_and_resubmitted_with_one_request(live_stack, client):
    stack = live_stack(workers=1)
    run_id = stack.submit(client, **LONG)
    url = stack.api(f"api/runs/{run_id}/events")
    before = read_until_training(client, url, 4)
    os.killpg(stack.workers[0].pid, signal.SIGKILL)  # the Celery parent and its pool child
    t_kill = time.monotonic()
    run = stack.wait_status(client, run_id, ("lost",), timeout=30)
    assert run["status"] == "lost", run
    assert time.monotonic() - t_kill < 30
    exported = client.get(stack.api(f"api/runs/{run_id}/export"), params={"format": "json"}).json()
    assert [m.json() for m in before] == exported["events"][: len(before)]  # nothing stored was lost
    assert [e["seq"] for e in exported["events"]] == list(range(1, run["last_seq"] + 1))

    r = client.post(stack.api(f"api/runs/{run_id}/resubmit"))
    assert r.status_code == 201
    new_id = r.json()["id"]
    assert client.post(stack.api(f"api/runs/{new_id}/resubmit")).status_code == 409  # still queued
    stack.add_worker(ready=True)
    new = stack.wait_status(client, new_id, ("running",), timeout=60)
    assert new["status"] == "running" and new["spec"] == run["spec"]
    client.post(stack.api(f"api/runs/{new_id}/cancel"))
    assert stack.wait_status(client, new_id, ("cancelled",), timeout=10)["status"] == "cancelled"
    assert client.get(stack.api(f"api/runs/{run_id}")).json()["status"] == "lost"  # the old one stays


def test_nan_loss_ends_as_diverged_with_its_step(live_stack, client):
    stack = live_stack(workers=1)
    run_id = stack.submit(
        client,
        task="adding",
        cell="tanh",
        norm="none",
        optimizer="sgd",
        lr=10.0,
        seq_len=5,
        steps=200,
        hidden_size=16,
        eval_every=50,
    )
    events = [m.json() for m in iter_sse(client, stack.api(f"api/runs/{run_id}/events"), timeout=120)]
    final = events[-1]
    assert final["kind"] == "status" and final["payload"]["status"] == "diverged"
    assert 1 < final["step"] < 200 and f"step {final['step']}" in final["payload"]["message"]
    run = client.get(stack.api(f"api/runs/{run_id}")).json()
    assert run["status"] == "diverged" and run["summary"]["step"] == final["step"]
    assert run["error"] == final["payload"]["message"]  # the run itself says what diverged, and where


def test_redis_restart_loses_no_run_and_viewers_resume(live_stack, client, disposable_redis, pg_url):
    redis_url, restart = disposable_redis
    stack = live_stack(workers=1, database_url=pg_url, broker_url=redis_url, redis_url=redis_url)
    done_before = stack.submit(client, steps=20)
    assert stack.wait_status(client, done_before, ("completed",), timeout=60)["status"] == "completed"
    history_before = client.get(stack.api(f"api/runs/{done_before}/export"), params={"format": "json"}).json()

    live = stack.submit(client, **LONG)  # long enough to be running whatever this machine's speed
    queued = [stack.submit(client, steps=20, seed=i) for i in range(2)]  # behind `live` (one worker)
    seen: list = []

    def viewer():
        with httpx.Client() as c:
            seen.extend(iter_sse(c, stack.api(f"api/runs/{live}/events"), timeout=180))

    def scalars_seen() -> int:
        return sum(m.event == "scalars" for m in list(seen))

    def wait_scalars(n: int) -> None:
        deadline = time.monotonic() + 60
        while scalars_seen() < n and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scalars_seen() >= n, f"the viewer saw {scalars_seen()} scalars events, not {n}"

    t = threading.Thread(target=viewer)
    t.start()
    wait_scalars(3)
    assert client.get(stack.api(f"api/runs/{live}")).json()["status"] == "running"
    restart(pause_s=1.0)  # every queued message and every stream in Redis is gone
    wait_scalars(scalars_seen() + 5)  # the viewer carries on through the restart
    assert client.post(stack.api(f"api/runs/{live}/cancel")).status_code == 200
    t.join(60)

    run = client.get(stack.api(f"api/runs/{live}")).json()
    assert run["status"] == "cancelled", run
    assert [int(m.id) for m in seen] == list(range(1, run["last_seq"] + 1))  # no gap, no duplicate
    for q in queued:  # re-sent to the emptied queue, trained once
        qrun = stack.wait_status(client, q, ("completed", "failed"), timeout=120)
        assert qrun["status"] == "completed", qrun
        statuses = [
            m.json()["payload"]["status"]
            for m in iter_sse(client, stack.api(f"api/runs/{q}/events"))
            if m.event == "status"
        ]
        assert statuses == ["running", "completed"]
    after = client.get(stack.api(f"api/runs/{done_before}/export"), params={"format": "json"}).json()
    assert after["events"] == history_before["events"] and after["run"]["status"] == "completed"


def test_database_away_answers_503_then_recovers_by_itself(pg_proxy, tmp_path):
    schema = f"nlh_{uuid.uuid4().hex[:10]}"
    with psycopg.connect("postgresql://127.0.0.1:5432/test", autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = (
        f"postgresql+psycopg://127.0.0.1:{pg_proxy.port}/test?options=-csearch_path%3D{schema}"
        "&connect_timeout=2"
    )
    try:
        with TestClient(create_app(Settings(data_dir=tmp_path, database_url=url, queue="nlhpg"))) as c:
            run_id = c.post("/api/runs", json={"task": "digits", "steps": 10}).json()["id"]
            assert c.get(f"/api/runs/{run_id}").status_code == 200
            pg_proxy.stop()
            for method, path in (
                ("GET", f"/api/runs/{run_id}"),
                ("GET", "/api/runs"),
                ("GET", "/api/health"),
                ("POST", "/api/runs"),
                ("POST", f"/api/runs/{run_id}/cancel"),
            ):
                body = {"task": "digits", "steps": 10} if method == "POST" else None
                r = c.request(method, path, json=body)
                assert r.status_code == 503, (path, r.status_code, r.text)
                assert "database is unavailable" in r.json()["detail"] and r.headers["retry-after"]
            pg_proxy.start()
            t0 = time.monotonic()
            while c.get(f"/api/runs/{run_id}").status_code != 200:  # no restart: the pool reconnects
                assert time.monotonic() - t0 < 10, "the API did not recover within 10 s"
                time.sleep(0.2)
            assert c.get("/api/health").json()["database"] == "postgresql"
            assert c.get(f"/api/runs/{run_id}").json()["status"] == "queued"
    finally:
        with psycopg.connect("postgresql://127.0.0.1:5432/test", autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
