"""Cancelled runs never clog the queue: cancelling a queued run removes its message from the broker,
and a message whose run is no longer queued is dropped by the worker's main process (no pool child is
forked for it), so a run behind many cancelled ones starts as soon as a worker is free."""

from __future__ import annotations

import time

import httpx
import pytest

from normlab.queue import enqueue_run, waiting_run_ids
from normlab.settings import Settings
from normlab.store import Store
from normlab.store.store import new_run_id

pytestmark = pytest.mark.slow
LONG = {"steps": 20000, "eval_every": 1000}
N_STALE = 40


def _settings(stack, **extra) -> Settings:
    return Settings(data_dir=stack.data_dir, queue=stack.env["NORMLAB_QUEUE"], **extra)


@pytest.mark.parametrize("form", ["embedded", "redis"])
def test_cancelling_a_queued_run_removes_its_message(live_stack, redis_url, form):
    redis = {"broker_url": redis_url, "redis_url": redis_url} if form == "redis" else {}
    stack = live_stack(workers=1, **redis)
    with httpx.Client(timeout=30) as client:
        busy = stack.submit(client, **LONG)  # holds the only worker: what follows stays queued
        assert stack.wait_status(client, busy, ("running",), timeout=90)["status"] == "running"
        queued = [stack.submit(client, steps=10) for _ in range(5)]
        settings = _settings(stack, **redis)
        assert set(queued) <= waiting_run_ids(settings)
        for run_id in queued[:4]:
            assert client.post(stack.api(f"api/runs/{run_id}/cancel")).json()["status"] == "cancelled"
        assert waiting_run_ids(settings) == {queued[4]}
        client.post(stack.api(f"api/runs/{busy}/cancel"))
        assert stack.wait_status(client, queued[4], ("completed",), timeout=60)["status"] == "completed"


def test_a_run_behind_many_stale_messages_starts_once_the_worker_is_free(live_stack, redis_url):
    redis = {"broker_url": redis_url, "redis_url": redis_url}
    stack = live_stack(workers=1, **redis)
    settings = _settings(stack, **redis)
    store = Store(stack.env.get("NORMLAB_DATABASE_URL") or f"sqlite:///{stack.data_dir / 'normlab.sqlite'}")
    try:
        with httpx.Client(timeout=30) as client:
            busy = stack.submit(client, **LONG)
            assert stack.wait_status(client, busy, ("running",), timeout=90)["status"] == "running"
            # Cancelled in the store only: their messages stay in the broker, as after a cancel whose
            # removal raced with a worker, or runs deleted behind the API's back.
            stale = [new_run_id() for _ in range(N_STALE)]
            store.create_runs([{"id": r, "spec": {"task": "digits", "norm": "layer"}} for r in stale])
            for run_id in stale:
                enqueue_run(settings, run_id)
                store.request_cancel(run_id)
            behind = stack.submit(client, steps=10)
            client.post(stack.api(f"api/runs/{busy}/cancel"))
            assert stack.wait_status(client, busy, ("cancelled",), timeout=30)["status"] == "cancelled"
            freed = time.monotonic()
            run = stack.wait_status(client, behind, ("running", "completed"), timeout=120)
            waited = time.monotonic() - freed
            assert run["status"] in ("running", "completed")
            # One fork per stale message took seconds each; a look at the store takes milliseconds. The
            # bound leaves room for a loaded machine (the run's own child still has to start).
            assert waited < 15, f"{N_STALE} stale messages held the next run {waited:.1f} s"
            # A message trains the first queued run whichever run it names, so a stale one may have
            # trained `behind`; the rest are dropped, unforked, as the worker frees up.
            deadline = time.monotonic() + 60
            while set(stale) & (waiting_run_ids(settings) or set()) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not set(stale) & (waiting_run_ids(settings) or set())
    finally:
        store.dispose()
