"""A session cut off from its client in the middle of a pipelined batch keeps its transaction, and the
row locks its inserts took, with no server timer running: every later write of those rows waits behind
it (a dead worker's run could never be marked lost, a live worker's events never stored). The store ends
such sessions of its own application when a write of its own was held up, and the retry goes through;
other applications' sessions are left alone."""

from __future__ import annotations

import json
import time
import uuid
from urllib.parse import unquote

import psycopg
import pytest

from normlab.store import EventRow, Store, new_run_id
from normlab.store.deadline import held_up

TIMEOUT_S = 0.5


def _abandoned(pg_url: str, application_name: str, run_id: str, seq: int) -> psycopg.Connection:
    """A session that inserted an event of `run_id` in a pipeline and was never heard from again; its
    own idle-in-transaction limit is set, as the store's sessions have it."""
    schema = unquote(pg_url.rsplit("search_path", 1)[1]).lstrip("=")
    conn = psycopg.connect(
        "postgresql://127.0.0.1:5432/test",
        application_name=application_name,
        options=f"-c search_path={schema} -c idle_in_transaction_session_timeout={int(2 * TIMEOUT_S * 1000)}",
    )
    with conn.pipeline():
        conn.execute(
            "INSERT INTO events (run_id, seq, step, kind, time, payload) "
            "VALUES (%s, %s, 1, 'scalars', 1, '{}')",
            (run_id, seq),
        )
    return conn


@pytest.fixture
def app(pg_url) -> tuple[str, str]:
    """(a store URL, its application name): a name of this test's own, so that no store of a test running
    beside it (pytest-xdist) ends this test's abandoned sessions as its own."""
    name = f"normlab-{uuid.uuid4().hex[:12]}"
    return f"{pg_url}&application_name={name}", name


def _states(store: Store, *names: str) -> dict[str, str]:
    with psycopg.connect("postgresql://127.0.0.1:5432/test", autocommit=True) as admin:
        rows = admin.execute(
            "SELECT application_name, state FROM pg_stat_activity WHERE application_name = ANY(%s)",
            (list(names),),
        ).fetchall()
    return dict(rows)


def test_a_write_held_up_by_an_abandoned_session_ends_it_and_goes_through(pg_url, app):
    url, name = app
    store = Store(url, timeout_s=TIMEOUT_S)
    other, mine, their_run = f"not-normlab-{uuid.uuid4().hex[:8]}", new_run_id(), new_run_id()
    store.create_runs([{"id": r, "spec": {"task": "digits", "norm": "layer"}} for r in (mine, their_run)])
    ours, theirs = _abandoned(pg_url, name, mine, 1), _abandoned(pg_url, other, their_run, 1)
    try:
        row = EventRow(1, 1, "scalars", 2.0, json.dumps({"loss": 0.5}))
        with pytest.raises(Exception) as first:
            store.append_events(mine, [row], [], 1)
        assert held_up(first.value), first.value  # the database answered; the insert waited too long
        time.sleep(2 * TIMEOUT_S + 0.5)  # past the limit the server itself did not enforce
        store.after_held_up(first.value)
        store.append_events(mine, [row], [], 1)  # the retry goes through
        assert [e.payload for e in store.events_after(mine, 0)] == [row.payload]
        assert store.get_run(mine)["last_seq"] == 1
        assert _states(store, other) == {other: "idle in transaction"}  # not ours: left alone
    finally:
        for conn in (ours, theirs):
            conn.close()
        store.dispose()


def test_a_failure_of_another_kind_ends_nothing(pg_url, app):
    url, name = app
    store = Store(url, timeout_s=TIMEOUT_S)
    run_id = new_run_id()
    store.create_runs([{"id": run_id, "spec": {"task": "digits", "norm": "layer"}}])
    ours = _abandoned(pg_url, name, run_id, 1)
    try:
        time.sleep(2 * TIMEOUT_S + 0.5)
        store.after_held_up(OSError("connection refused"))  # the database away: nothing to end
        assert _states(store, name).get(name) == "idle in transaction"
        assert store.end_abandoned_transactions() == 1
    finally:
        ours.close()
        store.dispose()
