"""Nothing lost under faults, each with real processes and services started and stopped here: the
database away mid-run (every event stored, in order), a gap in a run's events (viewers move on, told
so), a worker that dies holding a run (it starts within 30 s of a free worker, once), an idle worker
next to a busy one (it takes the next run at once), and `normlab up` killed with -9 (its workers die
with it; a restart trains every queued run, once)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest

from benchmarks.service import free_port, iter_sse, service_env, spawn, start_api, stop_process, wait_http
from normlab.feed.redis_feed import RedisPublisher
from normlab.feed.writer import EventWriter
from normlab.queue import waiting_run_ids
from normlab.settings import Settings
from normlab.store import Store
from normlab_client.events import Event
from tests._poll import wait_for

pytestmark = pytest.mark.slow
LONG = {"steps": 20000, "eval_every": 1000}
PG_BASE = "postgresql://127.0.0.1:5432/test"


@pytest.fixture
def pg_schema():
    schema = f"nlnl_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield schema
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _wait(predicate, timeout: float, what: str, period: float = 0.2):
    return wait_for(predicate, timeout, what, period)


def _wait_offered(stack, run_id: str) -> None:
    """Wait until the run's message waits in the stack's broker: offered to every worker there is.

    A worker that prefetched while training would have taken it within its broker's poll (ms); a
    message seen waiting is one the busy workers left alone."""
    env = {k.removeprefix("NORMLAB_").lower(): v for k, v in stack.env.items() if k.startswith("NORMLAB_")}
    settings = Settings(**env)
    _wait(lambda: run_id in (waiting_run_ids(settings) or set()), 30, f"run {run_id}'s message waited", 0.05)


def _get(client: httpx.Client, url: str) -> dict | None:
    try:
        r = client.get(url)
    except httpx.HTTPError:
        return None
    return r.json() if r.status_code == 200 else None


def _status_events(client, stack, run_id: str) -> list[str]:
    export = client.get(stack.api(f"api/runs/{run_id}/export"), params={"format": "json"}).json()
    return [e["payload"]["status"] for e in export["events"] if e["kind"] == "status"]


def test_database_away_mid_run_loses_no_event_and_keeps_order(live_stack, client, pg_proxy, pg_schema):
    url = (
        f"postgresql+psycopg://127.0.0.1:{pg_proxy.port}/test?options=-csearch_path%3D{pg_schema}"
        "&connect_timeout=2"
    )
    stack = live_stack(workers=1, database_url=url, max_steps=200_000)
    # Long enough to be still training when it is cancelled, however quiet the machine.
    run_id = stack.submit(client, steps=200_000, eval_every=1000)
    run_url = stack.api(f"api/runs/{run_id}")
    before = _wait(
        lambda: (r := _get(client, run_url)) and r["last_seq"] >= 4 and r["last_seq"],
        90,
        "the run did not start streaming",
    )
    pg_proxy.stop()  # every connection cut, new ones refused: the database is away
    time.sleep(6)
    pg_proxy.start()
    # The worker carries on storing: events emitted during the outage, then new ones.
    _wait(
        lambda: (r := _get(client, run_url)) and r["last_seq"] >= before + 5,
        60,
        "no events were stored after the database came back",
    )
    assert client.post(stack.api(f"api/runs/{run_id}/cancel")).status_code == 200
    run = stack.wait_status(client, run_id, ("cancelled",), timeout=30)
    assert run["status"] == "cancelled", run
    export = client.get(stack.api(f"api/runs/{run_id}/export"), params={"format": "json"}).json()
    assert [e["seq"] for e in export["events"]] == list(range(1, run["last_seq"] + 1))


@pytest.mark.parametrize("form", ["redis", "embedded"])
def test_a_viewer_moves_on_past_a_gap_and_is_told(tmp_path, form, disposable_redis):
    """Events 1, 2, 4, 5 stored (3 lost in a fault), then the terminal 6: a viewer gets all of them with
    a notice standing in for 3, and its stream ends — it does not wait for 3 forever."""
    redis_url, _restart = disposable_redis
    extra = {"redis_url": redis_url} if form == "redis" else {}
    settings = Settings(data_dir=tmp_path, queue=f"nlgap-{uuid.uuid4().hex[:6]}", **extra)
    url, api = start_api(tmp_path, service_env(tmp_path, queue=settings.queue, **extra))
    store = Store(settings.resolved_database_url)
    publisher = RedisPublisher(settings) if form == "redis" else None
    try:
        with httpx.Client(timeout=10) as c:
            run_id = c.post(url + "api/runs", json={"task": "digits", "steps": 10}).json()["id"]
            assert store.claim(run_id) is not None
            writer = EventWriter(store, run_id, publisher)
            events = [Event(seq=1, step=0, kind="status", payload={"status": "running"})] + [
                Event(seq=s, step=s, kind="scalars", payload={"train_loss": 1.0 / s}) for s in (2, 4, 5)
            ]
            for e in events:
                writer.emit(e)
            time.sleep(0.5)  # stored (and published) with the gap
            seen: list = []

            def finish():
                time.sleep(1.0)
                writer.close(
                    {"status": "completed", "finished_at": time.time()},
                    {"status": "completed", "time": time.time()},
                )

            import threading

            t = threading.Thread(target=finish)
            t.start()
            seen = list(iter_sse(c, url + f"api/runs/{run_id}/events", timeout=20))
            t.join()
            assert [int(m.id) for m in seen] == [1, 2, 3, 4, 5, 6]
            gap = seen[2].json()
            assert seen[2].event == "log" and gap["payload"]["missing"]
            assert "Event 3" in gap["payload"]["message"]
            # A late joiner, reading the store, gets the same.
            assert [int(m.id) for m in iter_sse(c, url + f"api/runs/{run_id}/events", timeout=20)] == [
                1,
                2,
                3,
                4,
                5,
                6,
            ]
    finally:
        if publisher is not None:
            publisher.close()
        store.dispose()
        stop_process(api, signal.SIGTERM)


def _form_settings(form: str, redis_url: str) -> dict:
    return {"broker_url": redis_url, "redis_url": redis_url} if form == "redis" else {}


@pytest.mark.parametrize("form", ["redis", "embedded"])
def test_an_idle_worker_takes_the_next_run_while_another_trains(live_stack, client, disposable_redis, form):
    stack = live_stack(workers=1, **_form_settings(form, disposable_redis[0]))
    busy = stack.submit(client, **LONG)
    assert stack.wait_status(client, busy, ("running",), timeout=90)["status"] == "running"
    short = stack.submit(client, steps=20)
    _wait_offered(stack, short)  # the busy worker has had it on offer (were it allowed to prefetch)
    stack.add_worker(ready=True)
    run = stack.wait_status(client, short, ("completed",), timeout=90)
    assert run["status"] == "completed", "the new run waited behind the other worker's long run"
    assert client.get(stack.api(f"api/runs/{busy}")).json()["status"] == "running"
    client.post(stack.api(f"api/runs/{busy}/cancel"))


HOLDER = """
import sys, time
from normlab.queue import make_celery
from normlab.settings import Settings
settings = Settings()
with make_celery(settings).connection_for_read() as conn:
    queue = conn.SimpleQueue(settings.queue, no_ack=False)
    message = queue.get(timeout=60)  # taken, never acked, never claimed: then this process is killed
    print("holding", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("form", ["redis", "embedded"])
def test_a_run_taken_by_a_worker_that_died_starts_within_30s_of_a_free_worker_once(
    live_stack, client, disposable_redis, form
):
    """Failure order 1: a worker takes a queued run's message and dies before claiming it (a kill
    between prefetch and start); then a worker is free."""
    stack = live_stack(workers=0, **_form_settings(form, disposable_redis[0]))
    run_id = stack.submit(client, steps=20)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        env=stack.env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().startswith("holding")
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    stack.add_worker(ready=True)  # warm and consuming: free from here on
    t_free = time.monotonic()
    run = stack.wait_status(client, run_id, ("running", "completed"), timeout=60)
    assert run["status"] in ("running", "completed") and time.monotonic() - t_free < 30, run
    assert stack.wait_status(client, run_id, ("completed",), timeout=60)["status"] == "completed"
    time.sleep(3)  # any second copy of the message has been delivered and skipped by now
    assert _status_events(client, stack, run_id) == ["running", "completed"]


@pytest.mark.parametrize("form", ["redis", "embedded"])
def test_a_worker_killed_mid_run_leaves_the_next_run_to_a_free_worker_and_runs_nothing_twice(
    live_stack, client, disposable_redis, form
):
    """Failure order 2: a worker dies while training, with a run queued behind it; then a worker is
    free. The queued run starts (once); the killed one is `lost`, never trained again."""
    stack = live_stack(workers=1, **_form_settings(form, disposable_redis[0]))
    first = stack.submit(client, **LONG)
    assert stack.wait_status(client, first, ("running",), timeout=90)["status"] == "running"
    queued = stack.submit(client, steps=20)
    _wait_offered(stack, queued)
    os.killpg(stack.workers[0].pid, signal.SIGKILL)
    assert stack.wait_status(client, first, ("lost",), timeout=30)["status"] == "lost"
    stack.add_worker(ready=True)  # warm and consuming: free from here on
    t_free = time.monotonic()
    run = stack.wait_status(client, queued, ("running", "completed"), timeout=60)
    assert run["status"] in ("running", "completed") and time.monotonic() - t_free < 30, run
    assert stack.wait_status(client, queued, ("completed",), timeout=60)["status"] == "completed"
    assert _status_events(client, stack, queued) == ["running", "completed"]
    assert _status_events(client, stack, first) == ["running", "lost"]


def _descendants(pid: int) -> set[int]:
    """Every live process whose parent chain reaches pid (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    out, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - out
        out |= frontier
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_normlab_up_killed_leaves_no_worker_and_a_restart_trains_every_queued_run(tmp_path):
    port = free_port()
    env = service_env(tmp_path, lost_after_s=3, worker_heartbeat_s=0.5)
    url = f"http://127.0.0.1:{port}/"

    def up() -> subprocess.Popen:
        return spawn(["up", "--port", str(port), "--workers", "1"], env, tmp_path / "up.log")

    proc = up()
    try:
        wait_http(url + "api/health", 90, proc)
        with httpx.Client(timeout=30) as c:
            spec = {"task": "digits", "hidden_size": 16, **LONG}
            long_id = c.post(url + "api/runs", json=spec).json()["id"]
            _wait(
                lambda: c.get(url + f"api/runs/{long_id}").json()["status"] == "running",
                90,
                "the run never started",
            )
            queued = [
                c.post(
                    url + "api/runs", json={"task": "digits", "steps": 20, "hidden_size": 16, "seed": i}
                ).json()["id"]
                for i in range(3)
            ]
            time.sleep(1.0)
        workers = _descendants(proc.pid)
        assert len(workers) >= 2  # the Celery worker and its pool child, training
        os.kill(proc.pid, signal.SIGKILL)  # `up` alone, as an OOM kill would
        proc.wait()
        _wait(lambda: not [p for p in workers if _alive(p)], 10, "the workers outlived `normlab up`")
        # A message the crash took with it (a worker had taken it): the file queue must not lose the run.
        messages = sorted((tmp_path / "queue" / "messages").glob("*.msg"))
        assert len(messages) == 3
        messages[0].unlink()
        proc = up()
        wait_http(url + "api/health", 90, proc)
        with httpx.Client(timeout=30) as c:
            for run_id in queued:
                _wait(
                    lambda r=run_id: c.get(url + f"api/runs/{r}").json()["status"] == "completed",
                    120,
                    f"queued run {run_id} was not trained after the restart",
                )
                export = c.get(url + f"api/runs/{run_id}/export", params={"format": "json"}).json()
                assert [e["payload"]["status"] for e in export["events"] if e["kind"] == "status"] == [
                    "running",
                    "completed",
                ]
            assert c.get(url + f"api/runs/{long_id}").json()["status"] == "lost"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_event_json_is_unchanged_by_the_gap_notice():
    """The notice is an ordinary `log` event (kind and shape a client already reads)."""
    from backend.feed.hub import frames_filling_gaps
    from normlab.store import EventRow

    frames = frames_filling_gaps("r1", 1, [EventRow(4, 7, "scalars", 1.5, '{"train_loss":1.0}')])
    assert [f.seq for f in frames] == [2, 3, 4]
    notice = json.loads(frames[0].data)
    Event.model_validate({k: v for k, v in notice.items()})
    assert notice["kind"] == "log" and notice["payload"]["missing"] is True and notice["step"] == 7
