"""`normlab gc` (dry run and real, --keep-tagged) and `normlab backup` / `normlab restore` round trips,
on SQLite and PostgreSQL, through the command line."""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import func, select, update

from backend.auth import TokenStore
from normlab.cli import main
from normlab.store import EventRow, Store
from normlab.store.schema import events, metadata, rollups, run_tags, runs
from normlab_client.group_models import SweepMeta
from normlab_client.spec import RunSpec

DAY = 86400.0


@pytest.fixture
def store(db_url, tmp_path, monkeypatch):
    """The store the CLI sees (NORMLAB_DATA_DIR / NORMLAB_DATABASE_URL set for this test)."""
    monkeypatch.setenv("NORMLAB_DATA_DIR", str(tmp_path))
    if not db_url.startswith("sqlite"):
        monkeypatch.setenv("NORMLAB_DATABASE_URL", db_url)
    s = Store(db_url)
    yield s
    s.dispose()


def add_run(store: Store, run_id: str, *, status: str, ended_days_ago: float, tags=()) -> None:
    spec = RunSpec(task="digits", steps=5).resolved().model_dump(mode="json")
    store.create_runs([{"id": run_id, "spec": spec, "owner": "ada"}])
    ended = time.time() - ended_days_ago * DAY
    store.append_events(
        run_id,
        [EventRow(1, 0, "status", ended, '{"status":"running"}'), EventRow(2, 5, "scalars", ended, "{}")],
        [{"level": 1, "bucket": 0, "seq_last": 2, "step_last": 5, "time_last": ended, "data": "{}"}],
        1,
    )
    with store.engine.begin() as conn:
        done = None if status in ("queued", "running") else ended
        conn.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .values(status=status, created_at=ended - 60, finished_at=done)
        )
    if tags:
        store.set_labels(run_id, tags=list(tags))


def counts(store: Store, run_id: str) -> tuple[int, ...]:
    with store.engine.connect() as conn:
        return tuple(
            conn.execute(select(func.count()).select_from(t).where(t.c.run_id == run_id)).scalar_one()
            for t in (events, rollups, run_tags)
        )


def test_gc_dry_run_lists_then_real_run_deletes_old_runs_with_their_history(store, tmp_path, capsys):
    checkpoint = tmp_path / "checkpoints" / "old1" / "step-00000005.pt"  # the default checkpoint root
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"state")
    add_run(store, "old1", status="completed", ended_days_ago=120)
    add_run(store, "old2", status="failed", ended_days_ago=91)
    add_run(store, "oldtag", status="completed", ended_days_ago=200, tags=["paper"])
    add_run(store, "young", status="completed", ended_days_ago=10)
    add_run(store, "oldqueued", status="queued", ended_days_ago=150)  # never ended: never old

    assert main(["gc", "--older-than", "90d", "--keep-tagged", "--dry-run", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in listed["runs"]] == ["old1", "old2"] and listed["deleted"] == 0
    assert store.get_run("old1") is not None and counts(store, "old1") == (2, 1, 0)  # nothing deleted
    assert checkpoint.exists()

    assert main(["gc", "--older-than", "90d", "--keep-tagged"]) == 0
    out = capsys.readouterr().out
    assert "old1" in out and "deleted 2 run(s)" in out
    for gone in ("old1", "old2"):
        assert store.get_run(gone) is None and counts(store, gone) == (0, 0, 0)
    assert not checkpoint.parent.exists()
    assert counts(store, "oldtag") == (2, 1, 1)

    assert main(["gc", "--older-than", "13w"]) == 0  # without --keep-tagged the tagged one goes too
    assert "deleted 1 run(s)" in capsys.readouterr().out
    assert store.get_run("oldtag") is None and counts(store, "oldtag") == (0, 0, 0)
    left, _ = store.list_runs()
    assert sorted(r["id"] for r in left) == ["oldqueued", "young"]


def test_gc_refuses_an_age_without_a_unit(store, capsys):
    assert main(["gc", "--older-than", "90"]) == 2
    assert "90d" in capsys.readouterr().err


def snapshot(store: Store) -> dict:
    with store.engine.connect() as conn:
        return {
            name: sorted(map(tuple, conn.execute(select(table)))) for name, table in metadata.tables.items()
        }


def test_backup_and_restore_round_trip(store, tmp_path, capsys):
    add_run(store, "r1", status="completed", ended_days_ago=1, tags=["keep"])
    add_run(store, "r2", status="failed", ended_days_ago=2)
    store.set_labels("r1", name="baseline", note="*why* it matters")
    store.put_group("g1", SweepMeta(varied=["norm"]))
    token = TokenStore(store).create("ada")[1]
    before = snapshot(store)
    path = tmp_path / "backups" / "lab.bak"

    assert main(["backup", str(path)]) == 0
    assert "backed up to" in capsys.readouterr().out
    assert main(["backup", str(path)]) == 2  # never overwrites
    assert "exists" in capsys.readouterr().err

    # The lab goes on after the backup: a run is deleted, another added, a label changed.
    store.delete_run("r2")
    add_run(store, "r3", status="completed", ended_days_ago=0)
    store.set_labels("r1", name="renamed", tags=[])
    assert snapshot(store) != before

    assert main(["restore", str(path)]) == 0
    assert "restored" in capsys.readouterr().out
    fresh = Store(store.url)  # a new process's view
    try:
        assert snapshot(fresh) == before
        r1 = fresh.get_run("r1")
        assert r1["name"] == "baseline" and fresh.tags_of(["r1"]) == {"r1": ["keep"]}
        assert fresh.get_group("g1").meta == SweepMeta(varied=["norm"])
        assert TokenStore(fresh).check(token).name == "ada"
    finally:
        fresh.dispose()


def test_restore_refuses_what_is_not_a_backup_of_this_kind_of_store(store, tmp_path, capsys):
    junk = tmp_path / "junk.bak"
    junk.write_text("not a backup")
    assert main(["restore", str(junk)]) == 2
    assert "not a normlab backup" in capsys.readouterr().err
    assert main(["restore", str(tmp_path / "missing.bak")]) == 2
    assert "no backup file" in capsys.readouterr().err


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # its restore is one transaction
def test_a_postgresql_restore_that_fails_midway_leaves_the_store_as_it_was(store, tmp_path, monkeypatch):
    import subprocess

    import normlab.store.backup as backup_module
    from normlab.store.backup import BackupError, backup, restore

    add_run(store, "r1", status="completed", ended_days_ago=1)
    path = tmp_path / "lab.bak"
    backup(store.engine, store.url, path)
    add_run(store, "r2", status="completed", ended_days_ago=0)
    before = snapshot(store)
    real_run = subprocess.run

    def failing_at_the_end(cmd, **kw):  # the archive's SQL runs, then one statement fails
        if kw.get("input") is not None:
            kw["input"] += "\nSELECT 1 / 0;\n"
        return real_run(cmd, **kw)

    monkeypatch.setattr(backup_module.subprocess, "run", failing_at_the_end)
    with pytest.raises(BackupError, match="the store is unchanged"):
        restore(store.engine, store.url, path)
    assert snapshot(store) == before
