"""Bad input: malformed Last-Event-ID / after= cursors, unknown run ids, path tricks in export names,
and a browser tab reconnecting in a tight loop (bounded) against a real `normlab api`."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from benchmarks.service import iter_sse, service_env, start_api, stop_process
from normlab.feed.writer import EventWriter
from normlab.store import Store
from normlab_client.events import Event
from tests._poll import wait_for

SPEC = {"task": "digits", "steps": 20}
BAD_SINGLE = ["abc", "-1", "1e3", " 5", "9" * 40, "1.5", "0x10", "١٢", "5,6", "%00", "\t", "a" * 5000]
BAD_MULTI = [
    "a:1,b",
    "abc:١٢",
    ":::",
    "zz:1",
    "abc:-1",
    "abc:1:2",
    ",",
    "abc:" + "9" * 20,
    "\u00e9:1",
    "a" * 5000,
]


def test_malformed_cursors_get_400_never_5xx(make_client):
    client = make_client()
    run_id = client.post("/api/runs", json=SPEC).json()["id"]
    for value in BAD_SINGLE:
        r = client.get(f"/api/runs/{run_id}/events", params={"after": value})
        assert r.status_code == 400, (value, r.status_code)
        assert "sequence number" in r.json()["detail"]
        if value.isascii() and value.strip() == value and "\t" not in value:
            r = client.get(f"/api/runs/{run_id}/events", headers={"Last-Event-ID": value})
            assert r.status_code == 400, value
    for value in BAD_MULTI:
        r = client.get("/api/events", params={"runs": run_id, "after": value})
        assert r.status_code == 400 and "runA:12" in r.json()["detail"], value
    many = ",".join(f"{i:012x}" for i in range(51))
    assert client.get("/api/events", params={"runs": many}).status_code == 400


def test_unknown_ids_and_path_tricks(make_client):
    client = make_client()
    run_id = client.post("/api/runs", json=SPEC).json()["id"]
    for bad in ("nope", "0" * 12, "x" * 5000, "%2e%2e", "..%2f..%2fetc%2fpasswd", "🙂", "a%00b", "run'--"):
        for path in (
            f"/api/runs/{bad}",
            f"/api/runs/{bad}/export",
            f"/api/runs/{bad}/metrics",
            f"/api/runs/{bad}/events",
        ):
            r = client.get(path)
            assert r.status_code == 404, (path, r.status_code)
        assert client.post(f"/api/runs/{bad}/cancel").status_code == 404
        assert client.delete(f"/api/runs/{bad}").status_code == 404
        assert client.get("/api/events", params={"runs": bad}).status_code in (400, 404)
    for path in ("/api/runs/../../etc/passwd", "/api/runs/..%2F..%2Fetc%2Fpasswd/export"):
        assert client.get(path).status_code == 404
    for fmt in ("../../etc/passwd", "csv\r\nX-Evil: 1", "csv/../json", "CSV"):
        assert client.get(f"/api/runs/{run_id}/export", params={"format": fmt}).status_code == 422
    r = client.get(f"/api/runs/{run_id}/export", params={"format": "csv"})
    assert r.headers["content-disposition"] == f'attachment; filename="normlab-{run_id}.csv"'
    assert "x-evil" not in r.headers


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.slow
def test_a_tab_reconnecting_in_a_tight_loop_leaks_nothing(tmp_path):
    env = service_env(tmp_path, queue="nlh-storm", feed_poll_s=0.05)
    url, api = start_api(tmp_path, env)
    store = Store(f"sqlite:///{tmp_path / 'normlab.sqlite'}")
    try:
        with httpx.Client(timeout=10) as c:
            live = c.post(url + "api/runs", json=SPEC).json()["id"]  # no worker: stays queued
            done = c.post(url + "api/runs", json=SPEC).json()["id"]
            c.post(url + f"api/runs/{done}/cancel")
            events_url = url + f"api/runs/{live}/events"
            fds_before = _open_fds(api.pid)
            t0 = time.monotonic()
            for i in range(300):  # connect, read the first frame, drop: what a flapping tab does
                with c.stream("GET", events_url, headers={"Last-Event-ID": str(i % 3)}) as r:
                    assert r.status_code == 200
                    next(r.iter_bytes())
                finished = c.get(url + f"api/runs/{done}/events", headers={"Last-Event-ID": "1"})
                assert finished.status_code == 204
            storm_s = time.monotonic() - t0
            # the server closes each dropped stream once it notices the disconnect: its descriptors
            # come back down to where they were (a leak keeps them up past the bound)
            wait_for(lambda: _open_fds(api.pid) <= fds_before + 5, 15, "no connection or channel leaked")
            # answered, and within the 5 s target the fault benchmark holds health to (BENCHMARKS.md)
            assert c.get(url + "api/health", timeout=5).status_code == 200
            # the stream still works: a fresh viewer sees every event of the run, once
            store.claim(live)
            writer = EventWriter(store, live)
            writer.emit(Event(seq=1, step=0, kind="status", payload={"status": "running"}))
            for s in range(2, 12):
                writer.emit(Event(seq=s, step=s, kind="scalars", payload={"train_loss": 1.0 / s}))
            writer.close(
                {"status": "completed", "finished_at": time.time()},
                {"status": "completed", "time": time.time()},
            )
            got = [int(m.id) for m in iter_sse(c, events_url, timeout=20)]
            assert got == list(range(1, 13))
            assert storm_s < 120
    finally:
        store.dispose()
        stop_process(api, signal.SIGTERM)
