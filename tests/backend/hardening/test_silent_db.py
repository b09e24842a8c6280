"""PostgreSQL going silent (a proxy that stops forwarding and closes nothing, like a partition): every
store call fails within its deadline, the API answers 503 + Retry-After instead of hanging, and
everything recovers by itself; the run keeps training and a dead worker's run is still reported lost."""

from __future__ import annotations

import os
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from sqlalchemy.exc import DBAPIError

from normlab.store import Store

PG = "postgresql://127.0.0.1:5432/test"


@pytest.fixture
def proxied_pg(pg_proxy):
    """A PostgreSQL URL (a schema of its own) reached through `pg_proxy`."""
    schema = f"nlsil_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield (
        f"postgresql+psycopg://127.0.0.1:{pg_proxy.port}/test?options=-csearch_path%3D{schema}"
        f"&application_name={schema}"
    )
    pg_proxy.resume()
    with psycopg.connect(PG, autocommit=True) as conn:
        # A connection whose client went silent mid-transaction still holds its locks on the server:
        # end those backends, or DROP SCHEMA waits for them for good.
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (schema,)
        )
        conn.execute("SET lock_timeout = '30s'")
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_every_store_call_fails_within_its_deadline_then_works_again(proxied_pg, pg_proxy):
    store = Store(proxied_pg, timeout_s=1.0)
    try:
        store.create_runs([{"id": "r1", "spec": {"task": "digits", "norm": "layer"}}])
        assert store.get_run("r1")["status"] == "queued"
        pg_proxy.silence()
        calls = [
            lambda: store.get_run("r1"),  # a pooled connection: its reply never comes
            lambda: store.heartbeat("r1"),
            lambda: store.stale_runs(time.time()),
            lambda: store.cancel_requested("r1"),
        ]
        with ThreadPoolExecutor(len(calls)) as pool:  # at once: a new connection cannot even log in
            futures = [pool.submit(_outcome, call) for call in calls]
            outcomes = [f.result(timeout=30) for f in futures]
        assert all(isinstance(o, DBAPIError) for o in outcomes), outcomes
        pg_proxy.resume()
        deadline = time.monotonic() + 20
        while _outcome(lambda: store.get_run("r1")) is None or isinstance(
            _outcome(lambda: store.get_run("r1")), Exception
        ):
            assert time.monotonic() < deadline, "the store did not recover within 20 s"
            time.sleep(0.1)
        assert store.get_run("r1")["status"] == "queued"
    finally:
        pg_proxy.resume()
        store.dispose()


def _outcome(call):
    try:
        return call()
    except Exception as exc:
        return exc


LOST_AFTER_S = 20.0


def _outage_then_recovery(live_stack, proxied_pg, pg_proxy, redis_url, client) -> tuple:
    """A running run through 8 s of silent database: every read answers 503 + Retry-After within the
    deadline, health recovers by itself and the run (not called lost) goes on storing events."""
    # lost_after_s: longer than the 8 s outage by the seconds a loaded machine's worker needs to get its
    # connections back and store a heartbeat (at 8 s the reaper's first pass after the outage could find
    # only heartbeats from before it)
    stack = live_stack(
        workers=1,
        database_url=proxied_pg,
        broker_url=redis_url,
        redis_url=redis_url,
        lost_after_s=LOST_AFTER_S,
        max_steps=200_000,
    )
    # Long enough to be still training when the test ends, however quiet the machine.
    run_id = stack.submit(client, steps=200_000, eval_every=1000)
    assert stack.wait_status(client, run_id, ("running",), timeout=90)["status"] == "running"
    pg_proxy.silence()
    silent_at = time.monotonic()
    paths = [f"api/runs/{run_id}", "api/runs", "api/health", f"api/runs/{run_id}/metrics"] * 4
    # A hang (the old behaviour: minutes) fails here through the client's own timeout.
    with httpx.Client(timeout=9) as quick, ThreadPoolExecutor(len(paths)) as pool:
        answers = list(pool.map(lambda p: quick.get(stack.api(p)), paths))
    assert [r.status_code for r in answers] == [503] * len(paths), [r.text for r in answers]
    assert all(r.headers.get("retry-after") for r in answers)
    time.sleep(max(0.0, silent_at + 8 - time.monotonic()))  # keep it silent a while longer
    pg_proxy.resume()

    deadline = time.monotonic() + 30
    while (r := client.get(stack.api("api/health"))).status_code != 200:
        assert time.monotonic() < deadline, f"no recovery within 30 s: {r.status_code} {r.text}"
        time.sleep(0.2)
    before = client.get(stack.api(f"api/runs/{run_id}")).json()
    assert before["status"] == "running", before  # its heartbeats came back: not called lost
    deadline = time.monotonic() + 30
    while (now := client.get(stack.api(f"api/runs/{run_id}")).json())["last_seq"] <= before["last_seq"]:
        assert time.monotonic() < deadline, "the run stopped storing events after the outage"
        time.sleep(0.2)
    assert now["status"] == "running"
    return stack, run_id


@pytest.mark.slow
def test_silent_database_503_within_deadline_and_the_run_survives(
    proxied_pg, pg_proxy, live_stack, redis_url
):
    with httpx.Client(timeout=30) as client:
        _outage_then_recovery(live_stack, proxied_pg, pg_proxy, redis_url, client)


@pytest.mark.slow
def test_a_worker_dead_after_the_outage_is_lost(proxied_pg, pg_proxy, live_stack, redis_url):
    with httpx.Client(timeout=30) as client:
        stack, run_id = _outage_then_recovery(live_stack, proxied_pg, pg_proxy, redis_url, client)
        os.killpg(stack.workers[0].pid, signal.SIGKILL)
        killed = time.monotonic()
        assert stack.wait_status(client, run_id, ("lost",), timeout=60)["status"] == "lost"
        assert time.monotonic() - killed < LOST_AFTER_S + 10  # and the reaper's period and load


@pytest.mark.slow
def test_no_live_run_is_called_lost_after_ten_outages(proxied_pg, pg_proxy, live_stack, redis_url):
    """Ten outages longer than the loss timeout, two runs training through them on two workers: after
    each, both runs' workers get a full staleness window to store a heartbeat again, so neither is called
    lost (short settings keep each trial to seconds)."""
    lost_after_s, outage_s, trials = 4.0, 5.0, 10
    stack = live_stack(
        workers=2,
        database_url=proxied_pg,
        broker_url=redis_url,
        redis_url=redis_url,
        lost_after_s=lost_after_s,
        worker_heartbeat_s=0.3,
        db_timeout_s=1.0,
        max_steps=200_000,
    )
    with httpx.Client(timeout=30) as client:
        runs = [stack.submit(client, steps=200_000, eval_every=1000, seed=s) for s in range(2)]
        for run_id in runs:
            assert stack.wait_status(client, run_id, ("running",), timeout=90)["status"] == "running"
        falsely_lost = []
        for trial in range(trials):
            pg_proxy.silence()
            time.sleep(outage_s)  # the outage itself, not a wait for an event
            pg_proxy.resume()
            deadline = time.monotonic() + 30
            while client.get(stack.api("api/health")).status_code != 200:
                assert time.monotonic() < deadline, "no recovery within 30 s"
                time.sleep(0.1)
            watch_until = time.monotonic() + lost_after_s + 2.0  # past a whole window after recovery
            while time.monotonic() < watch_until:
                statuses = {r: client.get(stack.api(f"api/runs/{r}")).json()["status"] for r in runs}
                falsely_lost += [(trial, r) for r, s in statuses.items() if s == "lost"]
                if falsely_lost:
                    break
                time.sleep(0.2)
            assert falsely_lost == [], f"a live run was called lost after outage {trial + 1}"
