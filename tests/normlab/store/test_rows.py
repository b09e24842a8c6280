"""Typed persistence: the store's rows carry exactly their table's columns, and a stored event reads
back as the member of the event union its kind names (which decides "terminal" for the live feed)."""

from __future__ import annotations

import json

import pydantic
import pytest

from normlab.feed.redis_feed import is_terminal_row
from normlab.store import EventRow, RunRow, Store
from normlab.store.schema import runs
from normlab_client.events import (
    PAYLOADS,
    HiddenEvent,
    InterventionEvent,
    LogEvent,
    ScalarsEvent,
    StatusEvent,
    TypedEvent,
    parse_event,
)
from normlab_client.spec import RunSpec


def test_a_run_row_has_exactly_the_runs_columns(db_url):
    assert set(RunRow.__annotations__) == {c.name for c in runs.columns}
    store = Store(db_url)
    try:
        spec = RunSpec(task="digits", steps=5).resolved().model_dump(mode="json")
        store.create_runs([{"id": "typed1", "spec": spec}])
        row = store.get_run("typed1")
        assert row is not None and set(row) == set(RunRow.__annotations__)
        assert row["status"] == "queued" and json.loads(row["spec"])["task"] == "digits"
        claimed = store.claim("typed1")
        assert claimed is not None and claimed["status"] == "running" and set(claimed) == set(row)
    finally:
        store.dispose()


SCALARS = {"train_loss": 0.5, "grad_norm": 1.0, "lr": 1e-3, "steps_per_s": 9.0, "elapsed": 1.5}


def test_each_kind_reads_back_with_its_typed_payload():
    base = {"run_id": "r", "seq": 1, "step": 2, "time": 3.0}
    scalars = parse_event({**base, "kind": "scalars", "payload": SCALARS})
    assert isinstance(scalars, ScalarsEvent) and scalars.payload.train_loss == 0.5
    assert scalars.payload.val_loss is None
    hidden = parse_event({**base, "kind": "hidden", "payload": {"hidden_norms": [1.0, None]}})
    assert isinstance(hidden, HiddenEvent) and hidden.payload.hidden_norms == [1.0, None]
    log = parse_event(json.dumps({**base, "kind": "log", "payload": {"message": "hi", "where": "x"}}))
    assert isinstance(log, LogEvent) and log.payload.level == "info"
    change = {"changes": {"lr": {"old": 0.1, "new": 0.01}}, "source": "live"}
    intervention = parse_event({**base, "kind": "intervention", "payload": change})
    assert isinstance(intervention, InterventionEvent) and intervention.payload.changes["lr"].new == 0.01
    assert not intervention.terminal
    status = parse_event({**base, "kind": "status", "payload": {"status": "diverged"}})
    assert isinstance(status, StatusEvent) and status.terminal
    with pytest.raises(pydantic.ValidationError):  # a payload that breaks its kind's contract
        parse_event({**base, "kind": "scalars", "payload": {"train_loss": "high"}})
    with pytest.raises(pydantic.ValidationError):  # no such kind
        parse_event({**base, "kind": "mood", "payload": {}})


@pytest.mark.parametrize(
    "kind, payload, terminal",
    [
        ("status", {"status": "completed", "message": None, "metrics": {}}, True),
        ("status", {"status": "lost", "message": "no heartbeat"}, True),
        ("status", {"status": "running"}, False),
        # Text that merely looks like a terminal status is not one (the feed once matched substrings).
        ("status", {"status": "running", "resumed_from": {"status": "failed"}}, False),
        ("log", {"message": '"status":"completed"'}, False),
    ],
)
def test_the_feed_decides_terminal_from_the_typed_status(kind, payload, terminal):
    assert is_terminal_row(EventRow(4, 10, kind, 1.0, json.dumps(payload))) is terminal


def test_the_union_has_one_member_per_event_kind():
    """A kind added to the event contract (PAYLOADS) must get its typed member too."""
    members = TypedEvent.__origin__.__args__
    assert {m.model_fields["kind"].annotation.__args__[0] for m in members} == set(PAYLOADS)
    for m in members:
        kind = m.model_fields["kind"].annotation.__args__[0]
        assert m.model_fields["payload"].annotation is PAYLOADS[kind]


def test_preset_launch_times_read_each_launchs_runs_with_their_arm_on_either_database(db_url):
    from sqlalchemy import update

    from normlab.groups import preset_meta

    store = Store(db_url)
    try:
        spec = RunSpec(task="digits", steps=5).resolved().model_dump(mode="json")
        store.create_runs([{"id": i, "spec": spec, "group_id": "g1"} for i in ("a1", "b1")])
        store.create_runs([{"id": "c1", "spec": spec, "group_id": "g2"}])
        store.put_group("g1", preset_meta("fig6", {"a1": "LN", "b1": "BN"}, None))
        store.put_group("g2", preset_meta("fig6", {"c1": "LN"}, 10))  # a steps override: left out
        with store.engine.begin() as conn:
            conn.execute(
                update(runs)
                .where(runs.c.id == "a1")
                .values(status="completed", started_at=5.0, finished_at=9.0)
            )
        (launch,) = store.preset_launch_times()["fig6"]
        timed = {r.label: (r.status, r.seconds()) for r in launch.runs}
        assert timed == {"LN": ("completed", 4.0), "BN": ("queued", None)}
    finally:
        store.dispose()
