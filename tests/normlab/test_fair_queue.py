"""normlab.fair_queue: interactive runs before batch work, users and groups in turn, FIFO only among
equals — checked on hand-built queues, and through the store (SQLite) as the worker and the API use it."""

from __future__ import annotations

import pytest

from normlab import fair_queue
from normlab.settings import Settings
from normlab.store import get_store

SPEC = {"task": "digits", "norm": "layer"}


def _row(rid, t, owner=None, group=None):
    return {"id": rid, "created_at": float(t), "owner": owner, "group_id": group}


def test_a_single_run_goes_ahead_of_a_preset_queued_before_it():
    preset = [_row(f"p{i}", i, "ann", "g1") for i in range(10)]
    click = _row("lab", 20, "bob")
    assert fair_queue.order([*preset, click])[0] == "lab"
    assert fair_queue.positions([*preset, click])["lab"] == 1
    # a preset's own runs keep their order among themselves
    assert fair_queue.order(preset) == [f"p{i}" for i in range(10)]


def test_users_and_their_groups_take_turns_and_running_runs_count():
    ann = [_row(f"a{i}", i, "ann", "ga") for i in range(3)]
    bob = [_row(f"b{i}", 10 + i, "bob", "gb") for i in range(2)]
    assert fair_queue.order([*ann, *bob]) == ["a0", "b0", "a1", "b1", "a2"]
    # ann already has a run training: bob's first goes before her next
    busy = [_row("a-run", -1, "ann", "ga")]
    assert fair_queue.order([*ann, *bob], busy) == ["b0", "a0", "b1", "a1", "a2"]
    # one user's two sweeps alternate instead of the older one going first entirely
    two = [_row("x0", 0, "ann", "gx"), _row("x1", 1, "ann", "gx"), _row("y0", 2, "ann", "gy")]
    assert fair_queue.order(two) == ["x0", "y0", "x1"]
    # single runs of different users alternate too, each user's own in submission order
    singles = [_row("c0", 0, "cat"), _row("c1", 1, "cat"), _row("d0", 2, "dan")]
    assert fair_queue.order(singles) == ["c0", "d0", "c1"]


def test_wait_estimate_is_runs_ahead_per_worker_times_the_typical_run():
    assert fair_queue.typical_run_s([10.0, None, 30.0, 20.0, float("nan")]) == 20.0
    assert fair_queue.typical_run_s([]) is None
    assert fair_queue.wait_estimate(4, 20.0, workers=2) == 40.0
    assert fair_queue.wait_estimate(3, 20.0, workers=2) == 40.0
    assert fair_queue.wait_estimate(1, 20.0, workers=0) == 20.0
    assert fair_queue.wait_estimate(3, None, workers=2) is None


@pytest.fixture
def store(tmp_path):
    return get_store(Settings(data_dir=tmp_path))


def test_the_worker_claims_in_the_fair_order_whatever_message_it_holds(store):
    store.create_runs([{"id": f"p{i}", "spec": SPEC, "owner": "ann", "group_id": "g"} for i in range(3)])
    store.create_runs([{"id": "lab", "spec": SPEC, "owner": "bob", "group_id": None}])
    view = store.queue_view()
    assert view["positions"] == {"lab": 1, "p0": 2, "p1": 3, "p2": 4} and view["workers"] == 0
    # the message of the preset's first run arrives first: the Lab's run is trained
    assert store.claim_next("p0")["id"] == "lab"
    assert store.claim_next("p1")["id"] == "p0"
    assert store.queue_view()["positions"] == {"p1": 1, "p2": 2}
    assert store.claim_next("p2")["id"] == "p1" and store.claim_next("lab")["id"] == "p2"
    assert store.claim_next("p0") is None  # nothing queued: the message is skipped


def test_the_youngest_batch_run_yields_to_an_interactive_run_that_found_no_free_worker():
    batch = [
        {"id": "old", "created_at": 1.0, "started_at": 10.0, "group_id": "g"},
        {"id": "young", "created_at": 2.0, "started_at": 20.0, "group_id": "g"},
    ]
    lab = {"id": "lab", "created_at": 100.0, "group_id": None}
    assert fair_queue.to_yield([lab], batch, now=100.5, patience_s=1.0) == []  # a worker may still take it
    assert fair_queue.to_yield([lab], batch, now=101.0, patience_s=1.0) == ["young"]
    assert fair_queue.to_yield([lab], batch, now=101.0, patience_s=1.0, asked=["young"]) == []  # once
    second = {**lab, "id": "lab2"}
    assert fair_queue.to_yield([lab, second], batch, now=101.0, patience_s=1.0, asked=["young"]) == ["old"]
    # batch work waiting behind batch work yields nothing, nor does a worker holding interactive work
    assert fair_queue.to_yield([{**lab, "group_id": "h"}], batch, now=200.0, patience_s=1.0) == []
    busy = [*batch, {"id": "other-lab", "created_at": 3.0, "started_at": 30.0, "group_id": None}]
    assert fair_queue.to_yield([lab], busy, now=200.0, patience_s=1.0) == []


def test_with_every_known_worker_on_batch_work_the_yield_is_asked_at_once_and_pinned_groups_keep_theirs():
    batch = [
        {"id": "old", "created_at": 1.0, "started_at": 10.0, "group_id": "g"},
        {"id": "young", "created_at": 2.0, "started_at": 20.0, "group_id": "pinned"},
    ]
    lab = {"id": "lab", "created_at": 100.0, "group_id": None}
    assert fair_queue.to_yield([lab], batch, now=100.0, patience_s=1.0, workers=2) == ["young"]
    # a third worker may be free: the patience holds
    assert fair_queue.to_yield([lab], batch, now=100.0, patience_s=1.0, workers=3) == []
    assert fair_queue.to_yield([lab], batch, now=100.0, patience_s=1.0, workers=2, pinned=["pinned"]) == [
        "old"
    ]
    assert fair_queue.to_yield([lab], batch[1:], now=200.0, patience_s=1.0, pinned=["pinned"]) == []
