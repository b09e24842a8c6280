"""The weight sets' migration (0005_weight_sets): fisher events and run summaries stored with the old key
"groups" say "weight_sets" after `normlab db upgrade`, every other row as it was; a downgrade puts the old
key back (SQLite and PostgreSQL)."""

from __future__ import annotations

import json

from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import insert, select, update

from normlab.store import migrate
from normlab.store.schema import events, runs
from tests.normlab.store.release_0001 import make_release_store

REVISION = "0005_weight_sets"
ENTRY = {"name": "hidden.0.weight", "weight_norm": 2.5, "scale_invariant": True}
OLD = {"trace": {"hidden.0": 1.5}, "trace_estimator": {"hidden.0": "exact"}, "groups": [ENTRY], "lr": 0.1}


def _rows(conn) -> tuple[dict, dict]:
    evs = {(r.run_id, r.seq): r.payload for r in conn.execute(select(events))}
    sums = {r.id: r.summary for r in conn.execute(select(runs.c.id, runs.c.summary))}
    return evs, sums


def test_fisher_payloads_say_weight_sets_after_the_upgrade_and_groups_after_a_downgrade(engine):
    make_release_store(engine)
    old_text = json.dumps(OLD, separators=(",", ":"))
    hidden = json.dumps({"groups": [1, 2], "time_steps": 3}, separators=(",", ":"))  # not a fisher event
    series = [{"step": 10, "eta_hessian_lambda_max": None, "groups": [ENTRY]}]
    probes = {"fisher": OLD, "hidden": None, "fisher_series": series}
    summary = json.dumps({"metrics": {"val_loss": 0.5}, "probes": probes})
    with engine.begin() as conn:
        conn.execute(
            insert(events),
            [
                {
                    "run_id": "run000000000",
                    "seq": 4,
                    "step": 40,
                    "kind": "fisher",
                    "time": 1.0,
                    "payload": old_text,
                },
                {
                    "run_id": "run000000000",
                    "seq": 5,
                    "step": 50,
                    "kind": "hidden",
                    "time": 2.0,
                    "payload": hidden,
                },
            ],
        )
        conn.execute(update(runs).where(runs.c.id == "run000000001").values(summary=summary))
        before_events, before_summaries = _rows(conn)

    assert migrate.upgrade(engine)[1] == migrate.head_revision()
    with engine.connect() as conn:
        after_events, after_summaries = _rows(conn)
    new = {("weight_sets" if k == "groups" else k): v for k, v in OLD.items()}
    assert list(json.loads(after_events[("run000000000", 4)])) == list(new)  # same place, new name
    assert json.loads(after_events[("run000000000", 4)]) == new
    assert json.loads(after_summaries["run000000001"])["probes"]["fisher"] == new
    assert json.loads(after_summaries["run000000001"])["probes"]["fisher_series"] == [
        {"step": 10, "eta_hessian_lambda_max": None, "weight_sets": [ENTRY]}
    ]
    assert json.loads(after_summaries["run000000001"])["metrics"] == {"val_loss": 0.5}
    changed = {("run000000000", 4)}
    assert {k: v for k, v in after_events.items() if k not in changed} == {
        k: v for k, v in before_events.items() if k not in changed
    }  # the hidden event's own "groups" and every other event untouched
    assert {k: v for k, v in after_summaries.items() if k != "run000000001"} == {
        k: v for k, v in before_summaries.items() if k != "run000000001"
    }

    previous = ScriptDirectory.from_config(migrate.alembic_config()).get_revision(REVISION).down_revision
    with engine.connect() as conn:
        command.downgrade(migrate.alembic_config(conn), previous)
        conn.commit()
        down_events, down_summaries = _rows(conn)
    assert down_events[("run000000000", 4)] == old_text
    assert json.loads(down_summaries["run000000001"]) == json.loads(summary)
    assert migrate.upgrade(engine)[1] == migrate.head_revision()
