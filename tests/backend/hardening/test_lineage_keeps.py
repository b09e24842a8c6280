"""Lineage keeps what it needs (in-process API, SQLite, checkpoint files written by hand): a refused fork
pins nothing; DELETE and `normlab gc` never remove a checkpoint a queued or running fork needs (they
refuse saying so, or delete the queued forks too when asked); the children of a deleted parent are
told so, and a fork whose parent was deleted fails naming that, not retention."""

from __future__ import annotations

import json
import time

from sqlalchemy import update

from normlab import checkpoints
from normlab.cli import main
from normlab.settings import Settings
from normlab.store import get_store
from normlab.store.schema import runs

SPEC = {"task": "digits", "steps": 40}


def submit(client, **spec) -> str:
    r = client.post("/api/runs", json={**SPEC, **spec})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def ended_with_checkpoints(tmp_path, client, *at: int, ended_at: float | None = None) -> str:
    """A completed run with (fake) checkpoint files at the steps `at`."""
    run_id = submit(client)
    store = get_store(Settings(data_dir=tmp_path))
    store.claim(run_id, "test-worker")
    store.finish_with_status(run_id, "completed", None, only_from=("running",))
    if ended_at is not None:
        with store.engine.begin() as conn:
            conn.execute(update(runs).where(runs.c.id == run_id).values(finished_at=ended_at))
    root = Settings(data_dir=tmp_path).checkpoint_root
    for step in at:
        checkpoints.write(checkpoints.path_for(root, run_id, step), b"state", durable=False)
    return run_id


def fork(client, run_id: str, step: int, **changes):
    return client.post(f"/api/runs/{run_id}/fork", json={"step": step, "changes": changes})


def test_a_refused_fork_pins_nothing(make_client, tmp_path):
    client = make_client(max_active_runs=1)
    parent = ended_with_checkpoints(tmp_path, client, 10, 20)
    assert fork(client, parent, 10, lr=0.01).status_code == 201  # the server now holds 1 active run
    r = fork(client, parent, 20, lr=0.02)
    assert r.status_code == 429, r.text
    r = fork(client, parent, 20, steps=10**6)  # refused by the job-size limits
    assert r.status_code == 422, r.text
    pinned = client.get(f"/api/runs/{parent}/checkpoints").json()["pinned"]
    assert pinned == [10]
    root = Settings(data_dir=tmp_path).checkpoint_root
    assert sorted(p.name for p in (checkpoints.run_dir(root, parent) / "pins").iterdir()) == ["10"]


def test_delete_refuses_a_parent_whose_fork_is_queued_unless_asked(make_client, tmp_path):
    client = make_client()
    parent = ended_with_checkpoints(tmp_path, client, 10)
    child = fork(client, parent, 10, lr=0.01).json()["id"]
    r = client.delete(f"/api/runs/{parent}")
    assert r.status_code == 409 and child in r.json()["detail"] and "with_children=true" in r.json()["detail"]
    root = Settings(data_dir=tmp_path).checkpoint_root
    assert checkpoints.steps(root, parent) == [10]  # nothing removed
    assert client.delete(f"/api/runs/{parent}", params={"with_children": "true"}).status_code == 204
    assert client.get(f"/api/runs/{child}").status_code == 404
    assert client.get(f"/api/runs/{parent}").status_code == 404 and checkpoints.steps(root, parent) == []


def test_a_running_fork_keeps_its_parent_even_with_children(make_client, tmp_path):
    client = make_client()
    parent = ended_with_checkpoints(tmp_path, client, 10)
    child = fork(client, parent, 10, lr=0.01).json()["id"]
    get_store(Settings(data_dir=tmp_path)).claim(child, "test-worker")
    r = client.delete(f"/api/runs/{parent}", params={"with_children": "true"})
    assert r.status_code == 409 and "cancel the running ones" in r.json()["detail"]
    assert client.get(f"/api/runs/{child}").json()["status"] == "running"


def test_gc_keeps_a_run_whose_fork_is_queued_and_says_why(make_client, tmp_path, capsys):
    client = make_client()
    long_ago = time.time() - 100 * 86400
    parent = ended_with_checkpoints(tmp_path, client, 10, ended_at=long_ago)
    lone = ended_with_checkpoints(tmp_path, client, 10, ended_at=long_ago)
    child = fork(client, parent, 10, lr=0.01).json()["id"]
    assert main(["gc", "--older-than", "90d", "--data-dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in out["runs"]] == [lone] and out["deleted"] == 1
    assert [(r["id"], r["forks"]) for r in out["kept"]] == [(parent, [child])]
    root = Settings(data_dir=tmp_path).checkpoint_root
    assert checkpoints.steps(root, parent) == [10] and checkpoints.steps(root, lone) == []
    assert main(["gc", "--older-than", "90d", "--data-dir", str(tmp_path)]) == 0
    assert f"{parent}  kept: its fork(s) {child}" in capsys.readouterr().out


def test_children_of_a_deleted_parent_are_told_so(make_client, tmp_path):
    from workers.jobs import run_training

    client = make_client()
    parent = ended_with_checkpoints(tmp_path, client, 10)
    child = fork(client, parent, 10, lr=0.01).json()["id"]
    store = get_store(Settings(data_dir=tmp_path))
    store.request_cancel(child)  # ended: the parent may go
    assert client.delete(f"/api/runs/{parent}").status_code == 204
    assert client.get(f"/api/runs/{child}/lineage").json()["parent"] == {
        "id": parent,
        "step": 10,
        "kind": "fork",
        "deleted": True,
    }
    # a copy of the fork queued again (as a resubmit does) fails naming its deleted parent
    again = client.post(f"/api/runs/{child}/resubmit").json()["id"]

    def never(*_a, **_k):
        raise AssertionError("the engine must not start a fork without its parent's checkpoint")

    assert run_training(again, Settings(data_dir=tmp_path), train=never) == "failed"
    error = client.get(f"/api/runs/{again}").json()["error"]
    assert f"parent run {parent} was deleted" in error and "retention" not in error
