"""The results store on SQLite and PostgreSQL: batched writes, roll-up downsampling checked against a
brute-force definition, status transitions, the reaper."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import time

import pytest

from backend.metrics import run_metrics
from backend.reaper import reap_once
from normlab.feed.writer import EventWriter
from normlab.store import Store, new_run_id
from normlab_client.events import Event
from normlab_client.spec import RunSpec


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path, pg_url):
    s = Store(f"sqlite:///{tmp_path / 'db.sqlite'}" if request.param == "sqlite" else pg_url)
    yield s
    s.dispose()


def make_run(store: Store) -> str:
    run_id = new_run_id()
    spec = RunSpec(task="digits", steps=5).resolved().model_dump(mode="json")
    store.create_runs([{"id": run_id, "spec": spec}])
    return run_id


def scalars(step: int, loss: float, val: float | None) -> dict:
    return {
        "train_loss": loss,
        "val_loss": val,
        "accuracy": None,
        "bpc": None,
        "grad_norm": 1.0,
        "lr": 1e-3,
        "steps_per_s": 10.0,
        "elapsed": step * 0.1,
    }


def write_run(store: Store, n: int, seed: int = 0) -> tuple[str, list[dict]]:
    """A claimed run with n scalars events (random losses, one spike, val every 7th), then completed."""
    rng = random.Random(seed)
    run_id = make_run(store)
    assert store.claim(run_id) is not None
    writer = EventWriter(store, run_id, flush_s=0.01)
    points = []
    writer.emit(Event(seq=1, step=0, kind="status", payload={"status": "running"}))
    for i in range(n):
        loss = 1000.0 if i == n // 3 else rng.random()
        p = scalars(i + 1, loss, rng.random() if i % 7 == 0 else None)
        points.append(p)
        writer.emit(Event(seq=i + 2, step=i + 1, kind="scalars", payload=p))
    writer.emit(Event(seq=n + 2, step=n, kind="status", payload={"status": "completed", "metrics": {}}))
    writer.close(
        {"status": "completed", "finished_at": time.time(), "summary": "{}"},
        {"status": "completed", "time": time.time()},
    )
    return run_id, points


def brute_force(points: list[dict], name: str, size: int) -> list[tuple[int, float, float, float]]:
    """(last step, mean, min, max) over consecutive groups of `size` points, skipping nulls."""
    out = []
    for start in range(0, len(points), size):
        group = [(start + j + 1, p[name]) for j, p in enumerate(points[start : start + size])]
        vals = [v for _, v in group if v is not None]
        if vals:
            out.append((group[-1][0], sum(vals) / len(vals), min(vals), max(vals)))
    return out


def test_downsampling_matches_definition_and_keeps_spikes(store):
    n = 1000
    run_id, points = write_run(store, n)
    run = store.get_run(run_id)
    assert run["status"] == "completed" and run["scalars_count"] == n and run["last_seq"] == n + 2
    for max_points in (10, 100, 999, 1000, 5000):
        m = run_metrics(store, run, ["train_loss", "val_loss"], max_points)
        size = 1 if n <= max_points else 4 ** math.ceil(math.log(n / max_points, 4) - 1e-12)
        assert m["downsampled"] == (size > 1) and m["total_points"] == n
        for name in ("train_loss", "val_loss"):
            s = m["series"][name]
            expected = brute_force(points, name, size)
            assert len(s["step"]) == len(expected) <= max_points
            assert s["step"] == [e[0] for e in expected]
            assert s["value"] == pytest.approx([e[1] for e in expected], rel=1e-12)
            assert s["min"] == pytest.approx([e[2] for e in expected], rel=1e-12)
            assert s["max"] == pytest.approx([e[3] for e in expected], rel=1e-12)
        assert max(m["series"]["train_loss"]["max"]) == 1000.0  # the spike survives any bucketing


def test_open_tail_bucket_is_read_raw(store):
    run_id, points = write_run(store, 4**3 + 5)  # 69 points: with max_points 20, buckets of 4 + a tail
    m = run_metrics(store, store.get_run(run_id), ["train_loss"], 20)
    expected = brute_force(points, "train_loss", 4)
    assert m["series"]["train_loss"]["value"] == pytest.approx([e[1] for e in expected], rel=1e-12)


def test_terminal_event_and_final_status_land_together(store):
    run_id, _ = write_run(store, 3)
    run = store.get_run(run_id)
    rows = store.events_after(run_id, 0)
    assert [r.seq for r in rows] == list(range(1, 6))
    assert json.loads(rows[-1].payload)["status"] == "completed" and run["status"] == "completed"


def test_non_finite_values_become_null(store):
    run_id = make_run(store)
    store.claim(run_id)
    writer = EventWriter(store, run_id)
    writer.emit(Event(seq=1, step=1, kind="scalars", payload=scalars(1, float("nan"), float("inf"))))
    writer.close({"status": "diverged"}, {"status": "diverged", "time": time.time()})
    payload = json.loads(store.events_after(run_id, 0)[0].payload)
    assert payload["train_loss"] is None and payload["val_loss"] is None
    assert store.get_run(run_id)["status"] == "diverged"


def test_claim_cancel_and_reaper_transitions(store):
    queued, running = make_run(store), make_run(store)
    assert store.request_cancel(queued)[0] == "cancelled"
    assert store.claim(queued) is None  # a cancelled run is never trained
    assert json.loads(store.events_after(queued, 0)[0].payload)["status"] == "cancelled"
    assert store.claim(running) is not None and store.claim(running) is None  # claimed once only
    assert not store.cancel_requested(running)
    assert store.request_cancel(running) == ("running", None) and store.cancel_requested(running)
    assert reap_once(store, lost_after_s=60) == []  # fresh heartbeat
    time.sleep(0.05)
    assert reap_once(store, lost_after_s=0.01) == [running]
    run = store.get_run(running)
    assert run["status"] == "lost" and run["last_seq"] == 1
    assert json.loads(store.events_after(running, 0)[-1].payload)["status"] == "lost"
    assert store.delete_run(running) and store.get_run(running) is None


def test_list_filters_and_order(store):
    ids = [make_run(store) for _ in range(3)]
    rows, total = store.list_runs(task="digits", offset=0, limit=2)
    assert total >= 3 and [r["id"] for r in rows] == ids[::-1][:2]  # newest first
    assert store.queue_position(store.get_run(ids[2])["created_at"]) >= 3


class _AwayStore:
    """A store whose database is away until `back_at` (monotonic); one running run, whose worker's
    heartbeat resumes `resume_after` s after the database is back (None: it never does, the worker died)."""

    timeout_s = None  # (the store's deadline: none here)

    def __init__(self, back_at: float, resume_after: float | None):
        self.back_at, self.resume_after, self.lost_at = back_at, resume_after, None
        self.heartbeat_at = time.time()  # its last heartbeat before the outage

    def ping(self) -> None:
        if time.monotonic() < self.back_at:
            raise OSError("connection refused")

    def stale_runs(self, older_than: float) -> list[str]:
        self.ping()
        if self.resume_after is not None and time.monotonic() >= self.back_at + self.resume_after:
            self.heartbeat_at = time.time()  # the worker reconnected and beats again
        return ["r"] if self.heartbeat_at < older_than and self.lost_at is None else []

    def finish_with_status(self, run_id, status, message, only_from, stale_before=None):
        self.lost_at = time.monotonic()
        return {"status": status}


@pytest.mark.parametrize("resume_after", [0.3, None])
def test_after_an_outage_workers_get_a_whole_window_from_when_the_database_answers(resume_after):
    """lost_after 0.5 s, heartbeat 0.1 s: staleness 0.5 s, period 0.2 s. A worker that beats again 0.3 s
    after the database is back is not called lost (its heartbeat is 6 windows old by then); a dead one is,
    but only a full window after the database answered again."""
    from backend.reaper import reaper_loop, reaper_timing

    period, stale = reaper_timing(0.5, 0.1)
    back_at = time.monotonic() + 1.0
    store = _AwayStore(back_at, resume_after)

    async def run_for(seconds: float):
        task = asyncio.ensure_future(reaper_loop(store, 0.5, heartbeat_s=0.1))
        await asyncio.sleep(seconds)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run_for(2.6))
    if resume_after is not None:
        assert store.lost_at is None
    else:
        assert store.lost_at is not None and store.lost_at >= back_at + period + stale - 0.05
