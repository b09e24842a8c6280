"""`normlab restore` over a store in use (SQLite): refused while an API server or a worker uses it,
naming them; forced, it leaves no rows or checkpoint folders of runs the backup lacks, also for what a
worker still running writes afterwards."""

from __future__ import annotations

import json
import time

from sqlalchemy import func, select

from normlab import checkpoints
from normlab.cli import main
from normlab.settings import Settings
from normlab.store import EventRow, get_store, presence
from normlab.store.schema import events, rollups

SPEC = {"task": "digits", "norm": "layer", "steps": 10, "hidden_size": 16}


def rows_of(store, run_id: str) -> int:
    with store.engine.connect() as conn:
        return sum(
            conn.execute(select(func.count()).select_from(t).where(t.c.run_id == run_id)).scalar_one()
            for t in (events, rollups)
        )


def write_events(store, run_id: str, first_seq: int) -> None:
    """What a worker training `run_id` writes: events, a roll-up bucket, its counters."""
    now = time.time()
    rows = [EventRow(first_seq, first_seq, "scalars", now, json.dumps({"train_loss": 1.0}))]
    bucket = {"level": 1, "bucket": first_seq, "seq_last": first_seq, "step_last": first_seq}
    store.append_events(run_id, rows, [{**bucket, "time_last": now, "data": "{}"}], 1)


def test_restore_refuses_a_store_in_use_and_a_forced_one_leaves_no_orphans(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NORMLAB_DATA_DIR", str(tmp_path))
    settings = Settings(data_dir=tmp_path)
    store = get_store(settings)
    store.create_runs([{"id": "kept", "spec": SPEC}])
    backup = tmp_path / "lab.bak"
    assert main(["backup", str(backup)]) == 0

    # after the backup: a run a live worker trains, with events and checkpoints
    store.create_runs([{"id": "inflight", "spec": SPEC}])
    store.claim("inflight", "w-host:42")
    write_events(store, "inflight", 1)
    root = settings.checkpoint_root
    checkpoints.write(checkpoints.path_for(root, "inflight", 4), b"state", durable=False)
    capsys.readouterr()

    assert main(["restore", str(backup)]) == 2
    err = capsys.readouterr().err
    assert "w-host:42" in err and "inflight" in err and "--force" in err
    assert store.get_run("inflight")["status"] == "running"  # nothing was touched

    assert main(["restore", str(backup), "--force", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["removed"]["checkpoint_folders"] == 1
    assert store.get_run("inflight") is None and store.get_run("kept") is not None
    assert rows_of(store, "inflight") == 0 and checkpoints.steps(root, "inflight") == []
    write_events(store, "inflight", 2)  # the worker, still running, goes on writing
    assert rows_of(store, "inflight") == 0


def test_a_running_api_server_keeps_the_store_from_being_restored(make_client, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NORMLAB_DATA_DIR", str(tmp_path))
    store = get_store(Settings(data_dir=tmp_path))
    backup = tmp_path / "lab.bak"
    assert main(["backup", str(backup)]) == 0
    client = make_client()
    deadline = time.monotonic() + 10
    while not presence.in_use(store, 20.0) and time.monotonic() < deadline:
        time.sleep(0.05)
    [using] = presence.in_use(store, 20.0)
    assert using.startswith("the API server ")
    capsys.readouterr()
    assert main(["restore", str(backup)]) == 2
    assert "the API server" in capsys.readouterr().err
    client.__exit__(None, None, None)  # stopped: its note goes with it
    assert presence.in_use(store, 20.0) == []
    assert main(["restore", str(backup)]) == 0
