"""A worker busy training when Redis restarts (a disposable redis-server, real Celery workers): it holds
no second message while it trains (a free worker takes every run sent meanwhile, no re-send needed),
its own run is reported to the end, and afterwards it consumes the next message itself."""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis

pytestmark = pytest.mark.slow


def test_a_worker_busy_across_a_redis_restart_holds_nothing_and_carries_on(
    live_stack, client, disposable_redis
):
    redis_url, restart = disposable_redis
    stack = live_stack(workers=2, broker_url=redis_url, redis_url=redis_url, max_steps=200_000)
    busy = stack.submit(client, steps=200_000, eval_every=1000)  # runs until cancelled below
    run = stack.wait_status(client, busy, ("running",), timeout=120)
    assert run["status"] == "running", run
    busy_host = run["worker_host"]  # "host:pid" of the pool child training it
    busy_worker = os.getpgid(int(busy_host.rsplit(":", 1)[1]))  # its `normlab worker` process group

    restart(pause_s=1.0)  # the queue, the unacked messages and the feed's streams are gone
    short = [stack.submit(client, steps=20, seed=i) for i in range(3)]
    for run_id in short:
        done = stack.wait_status(client, run_id, ("completed", "failed"), timeout=180)
        assert done["status"] == "completed", done
        assert done["worker_host"] != busy_host  # the free worker trained every one
    assert client.get(stack.api(f"api/runs/{busy}")).json()["status"] == "running"
    broker = redis.Redis.from_url(redis_url)
    try:
        # kombu keeps every message a worker took and has not acked in this hash: the free worker acks
        # each run once its job returns, a moment after the run's 'completed' is stored (on a loaded
        # machine, seconds after), while a message the busy worker took stays until its 200,000-step run
        # ends, far past this deadline
        deadline = time.monotonic() + 30
        while broker.hlen("unacked"):
            assert time.monotonic() < deadline, broker.hgetall("unacked")
            time.sleep(0.2)
    finally:
        broker.close()

    # its run is reported to the end through the restarted Redis
    assert client.post(stack.api(f"api/runs/{busy}/cancel")).status_code == 200
    ended = stack.wait_status(client, busy, ("cancelled",), timeout=60)
    assert ended["status"] == "cancelled", ended
    events = client.get(stack.api(f"api/runs/{busy}/export"), params={"format": "json"}).json()["events"]
    assert [e["seq"] for e in events] == list(range(1, ended["last_seq"] + 1))
    assert events[-1]["kind"] == "status" and events[-1]["payload"]["status"] == "cancelled"

    # the next message is consumed by the worker that was busy (the other one is gone)
    free = next(p for p in stack.workers if p.pid != busy_worker)
    os.killpg(free.pid, signal.SIGKILL)
    last = stack.submit(client, steps=20, seed=9)
    done = stack.wait_status(client, last, ("completed", "failed"), timeout=180)
    assert done["status"] == "completed", done
