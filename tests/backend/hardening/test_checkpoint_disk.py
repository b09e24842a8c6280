"""A full checkpoint disk as the API sees it (in-process API, SQLite): forks and resumes that would need a
checkpoint the worker could not write are refused with that reason, and health reports the full disk."""

from __future__ import annotations

import json
import shutil
import time
from collections import namedtuple

from normlab import checkpoints
from normlab.settings import Settings
from normlab.store import get_store
from normlab.store.store import EventRow

SPEC = {"task": "digits", "steps": 40}
REFUSED = "No space left on device"


def run_with_refused_checkpoint(tmp_path, client, written: list[int], refused: int, status: str) -> str:
    """A run that wrote checkpoints at `written`, logged the one at `refused` as refused (what the engine
    logs on ENOSPC), and ended with `status`."""
    r = client.post("/api/runs", json=SPEC)
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    store = get_store(Settings(data_dir=tmp_path))
    store.claim(run_id, "test-worker")
    root = Settings(data_dir=tmp_path).checkpoint_root
    for step in written:
        checkpoints.write(checkpoints.path_for(root, run_id, step), b"state", durable=False)
    payload = {
        "level": "warning",
        "message": f"The checkpoint of step {refused} could not be written ({REFUSED}); …",
        "checkpoint_failed": {"step": refused, "reason": REFUSED},
    }
    scalars = {"train_loss": 1.0}
    rows = [
        EventRow(1, refused, "scalars", time.time(), json.dumps(scalars)),
        EventRow(2, refused, "log", time.time(), json.dumps(payload)),
    ]
    store.append_events(run_id, rows, [], 1)
    store.finish_with_status(run_id, status, None, only_from=("running",))
    return run_id


def test_a_fork_past_a_refused_checkpoint_is_refused_with_the_reason(make_client, tmp_path):
    client = make_client()
    run_id = run_with_refused_checkpoint(tmp_path, client, [10], 20, "completed")
    r = client.post(f"/api/runs/{run_id}/fork", json={"step": 25, "changes": {"lr": 0.01}})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "checkpoint of step 20 could not be written" in detail and REFUSED in detail
    assert "step 10" in detail and REFUSED in r.json()["fields"]["step"]
    assert client.post(f"/api/runs/{run_id}/fork", json={"step": 10, "changes": {}}).status_code == 201


def test_resuming_a_run_without_any_checkpoint_written_says_why(make_client, tmp_path):
    client = make_client()
    run_id = run_with_refused_checkpoint(tmp_path, client, [], 20, "lost")
    r = client.post(f"/api/runs/{run_id}/resume")
    assert r.status_code == 409 and REFUSED in r.json()["detail"]
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "lost"


def test_health_reports_a_full_checkpoint_disk(make_client, monkeypatch):
    client = make_client()
    assert client.get("/api/health").json()["status"] == "ok"
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: usage(2**30, 2**30 - 2**20, 2**20))
    health = client.get("/api/health").json()
    assert health["status"] == "degraded" and health["checkpoint_free_bytes"] == 2**20
    assert any("checkpoint folder's disk is full (1 MiB free)" in p for p in health["problems"])


def test_gc_sweeps_partial_files_killed_writers_left(tmp_path, capsys):
    import os

    from normlab.cli import main

    root = Settings(data_dir=tmp_path).checkpoint_root
    checkpoints.write(checkpoints.path_for(root, "abc123abc123", 4), b"state", durable=False)
    stale = checkpoints.run_dir(root, "abc123abc123") / ".tmp-killed.ckpt"
    stale.write_bytes(b"x" * 300)
    old = time.time() - checkpoints.STALE_TMP_S - 60
    os.utime(stale, (old, old))
    assert main(["gc", "--older-than", "90d", "--data-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["swept"] == {"files": 1, "bytes": 300}
    assert not stale.exists() and checkpoints.steps(root, "abc123abc123") == [4]
