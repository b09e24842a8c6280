"""Forks, interventions and resume through the API, with real workers: a fork of a finished and of a
running run, refused changes, an intervention seen live and by a late joiner and replayed by a
resubmit, resume of a lost run, and the lab form forking a run another worker trained."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from benchmarks.service import iter_sse, read_until_training, start_worker, stop_process
from normlab.cli import main

pytestmark = pytest.mark.slow
LONG = {"steps": 20000, "eval_every": 1000}


def events_of(client, stack, run_id, **kw) -> list[dict]:
    return [m.json() for m in iter_sse(client, stack.api(f"api/runs/{run_id}/events"), timeout=120, **kw)]


def scalars(events: list[dict]) -> list[tuple[int, float]]:
    return [(e["step"], e["payload"]["train_loss"]) for e in events if e["kind"] == "scalars"]


def wait_status(client, stack, run_id: str, wanted: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        run = client.get(stack.api(f"api/runs/{run_id}")).json()
        if run["status"] == wanted:
            return run
        assert time.monotonic() < deadline, f"run {run_id} is {run['status']}, not {wanted}"
        time.sleep(0.1)


def test_fork_a_finished_run_lineage_and_refusals(stack, client):
    parent = stack.submit(client, seed=3, checkpoint_every=3)
    parent_events = events_of(client, stack, parent)
    r = client.post(stack.api(f"api/runs/{parent}/fork"), json={"step": 10, "changes": {}})
    assert r.status_code == 201, r.text
    same = r.json()
    assert same["from_step"] == 10  # exactly the step asked for: replayed from the checkpoint of step 9
    r = client.post(stack.api(f"api/runs/{parent}/fork"), json={"step": 9, "changes": {"norm": "batch"}})
    other = r.json()["id"]
    same_events, other_events = events_of(client, stack, same["id"]), events_of(client, stack, other)
    assert scalars(same_events) == scalars(parent_events)[10:]  # bit for bit after the fork
    assert [s for s, _ in scalars(other_events)][0] == 10 and other_events[-1]["payload"][
        "status"
    ] == "completed"
    child = client.get(stack.api(f"api/runs/{other}")).json()
    assert child["spec"]["norm"] == "batch"
    assert child["spec"]["parent"] == {"id": parent, "step": 9, "checkpoint": None, "replay": []}
    replayed = client.get(stack.api(f"api/runs/{same['id']}")).json()["spec"]["parent"]
    assert replayed == {"id": parent, "step": 10, "checkpoint": 9, "replay": []}
    lineage = client.get(stack.api(f"api/runs/{other}/lineage")).json()
    assert lineage["parent"]["id"] == parent and [s["id"] for s in lineage["siblings"]] == [same["id"]]
    assert [c["id"] for c in client.get(stack.api(f"api/runs/{parent}/lineage")).json()["children"]] == [
        same["id"],
        other,
    ]
    assert 9 in client.get(stack.api(f"api/runs/{parent}/checkpoints")).json()["pinned"]

    for field, value, why in [
        ("task", "mnist1d", "task cannot change in a fork"),
        ("cell", "gru", "cell cannot change in a fork"),
        ("hidden_size", 32, "weights' shapes follow the hidden size"),
        ("layers", 3, "number of layers"),
    ]:
        r = client.post(stack.api(f"api/runs/{parent}/fork"), json={"step": 9, "changes": {field: value}})
        assert r.status_code == 422 and why in r.json()["detail"] and field in r.json()["fields"], r.text
    r = client.post(stack.api(f"api/runs/{parent}/fork"), json={"step": 9, "changes": {"lr": -1}})
    assert r.status_code == 422 and "lr" in r.json()["fields"]
    r = client.post(stack.api(f"api/runs/{parent}/fork"), json={"step": 10_000, "changes": {}})
    assert r.status_code == 422 and "has reached step" in r.json()["detail"] and "step" in r.json()["fields"]


def test_cli_fork(stack, client, capsys):
    parent = stack.submit(client, steps=12, checkpoint_every=2)
    events_of(client, stack, parent)
    args = ["fork", parent, "--step", "7", "--norm", "rms", "--lr", "0.01", "--url", stack.url, "--json"]
    assert main(args) == 0
    made = json.loads(capsys.readouterr().out)
    child = client.get(stack.api(f"api/runs/{made['id']}")).json()
    assert made["from_step"] == 7 and child["spec"]["norm"] == "rms" and child["spec"]["lr"] == 0.01
    assert main(["fork", parent, "--step", "7", "--batch-size", "0", "--url", stack.url]) == 2
    assert "422" in (err := capsys.readouterr().err) and "batch_size" in err
    assert main(["fork", parent, "--step", "seven", "--url", stack.url]) == 2
    assert "--step takes a step number or 'now'" in capsys.readouterr().err
    assert main(["fork", parent, "--step", "7", "--url", "http://127.0.0.1:9"]) == 2
    assert "no normlab server answered" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the shape of the model is no option of a fork
        main(["fork", parent, "--step", "7", "--hidden-size", "8"])


def test_intervention_reaches_live_and_late_viewers_and_a_resubmit_replays_it(stack, client):
    run_id = stack.submit(client, steps=400, eval_every=100)
    url = stack.api(f"api/runs/{run_id}/events")
    read_until_training(client, url, 3)
    r = client.post(stack.api(f"api/runs/{run_id}/interventions"), json={"lr": 0.0123})
    assert r.status_code == 202, r.text
    live = [m.json() for m in iter_sse(client, url, timeout=120)]  # from the start, until the end
    [event] = [e for e in live if e["kind"] == "intervention"]
    assert event["payload"]["changes"]["lr"] == {"old": 0.001, "new": 0.0123}
    step = event["step"]
    assert all(
        e["payload"]["lr"] == (0.0123 if e["step"] >= step else 0.001) for e in live if e["kind"] == "scalars"
    )
    late = events_of(client, stack, run_id)  # a late joiner after the end gets it from the history
    assert [e for e in late if e["kind"] == "intervention"] == [event]
    run = client.get(stack.api(f"api/runs/{run_id}")).json()
    assert run["spec"]["interventions"] == [
        {"step": step, "lr": 0.0123, "weight_decay": None, "momentum": None, "freeze_gain": None}
    ]
    again = client.post(stack.api(f"api/runs/{run_id}/resubmit")).json()["id"]
    replayed = events_of(client, stack, again)
    assert scalars(replayed) == scalars(live)
    assert [e["step"] for e in replayed if e["kind"] == "intervention"] == [step]
    r = client.post(stack.api(f"api/runs/{run_id}/interventions"), json={"lr": 0.1})
    assert r.status_code == 409 and "not running" in r.json()["detail"]


def test_fork_a_running_run_now(stack, client):
    run_id = stack.submit(client, **LONG)
    read_until_training(client, stack.api(f"api/runs/{run_id}/events"), 3)
    r = client.post(stack.api(f"api/runs/{run_id}/fork"), json={"step": "now", "changes": {"lr": 0.002}})
    assert r.status_code == 201, r.text
    child, from_step = r.json()["id"], r.json()["from_step"]
    client.post(stack.api(f"api/runs/{run_id}/cancel"))
    first = [m.json() for m in read_until_training(client, stack.api(f"api/runs/{child}/events"), 2)]
    client.post(stack.api(f"api/runs/{child}/cancel"))
    every = 50  # a 20000-step run logs every 50 steps: the child's first point is the next one
    assert from_step >= 1 and scalars(first)[0][0] == (from_step // every + 1) * every
    assert first[-1]["payload"]["lr"] == 0.002


def test_resume_a_lost_run_trains_each_step_once(fresh_stack, client):
    stack = fresh_stack("embedded")
    run_id = stack.submit(client, steps=3000, eval_every=1000, checkpoint_every=16)
    deadline = time.monotonic() + 60
    while not _stored_past_a_checkpoint(client, stack, run_id):
        assert time.monotonic() < deadline, "no checkpoint was written and stored past"
        time.sleep(0.05)
    os.killpg(stack.procs[0].pid, signal.SIGKILL)
    wait_status(client, stack, run_id, "lost")
    lost = [s for s, _ in scalars(events_of(client, stack, run_id))]
    # the latest checkpoint the stored history reaches (a later one's events may not have been stored)
    last = max(
        s for s in client.get(stack.api(f"api/runs/{run_id}/checkpoints")).json()["steps"] if s <= lost[-1]
    )
    stack.procs[0] = start_worker(stack.data_dir, stack.env, "w-again")
    r = client.post(stack.api(f"api/runs/{run_id}/resume"))
    assert r.status_code == 202 and r.json() == {"id": run_id, "from_step": last, "status": "queued"}, r.text
    for m in iter_sse(client, stack.api(f"api/runs/{run_id}/events"), timeout=120):
        if m.event == "scalars" and m.json()["step"] > lost[-1] + 8:  # the second worker reports
            break
    client.post(stack.api(f"api/runs/{run_id}/cancel"))
    history = events_of(client, stack, run_id)  # the whole run, read from its start, to its end
    steps = [s for s, _ in scalars(history)]
    # the same run goes on: its stored steps, then the ones the second worker trained, each once
    # (steps after the checkpoint that were stored already are trained again, not reported again)
    assert steps[: len(lost)] == lost and steps[len(lost)] == lost[-1] + 8
    assert steps == list(range(8, 8 * len(steps) + 1, 8))  # a 3000-step run logs every 8 steps
    assert [e["seq"] for e in history] == list(range(1, len(history) + 1))
    statuses = [e["payload"]["status"] for e in history if e["kind"] == "status"]
    assert statuses == ["running", "running", "cancelled"]  # the loss is a warning in its log now
    assert any("Resumed from the checkpoint of step" in e["payload"].get("message", "") for e in history)
    run = client.get(stack.api(f"api/runs/{run_id}")).json()
    assert (
        run["status"] == "cancelled"
        and client.get(stack.api(f"api/runs/{run_id}/lineage")).json()["children"] == []
    )
    assert client.post(stack.api(f"api/runs/{run_id}/resume")).status_code == 409


def test_lab_form_forks_a_run_another_worker_trained(fresh_stack, client):
    stack = fresh_stack("redis", workers=2)
    parent = stack.submit(client, steps=2000, eval_every=1000, checkpoint_every=200)
    read_until_training(client, stack.api(f"api/runs/{parent}/events"), 2)
    trained_by = client.get(stack.api(f"api/runs/{parent}")).json()["worker_host"]
    pid = int(trained_by.rsplit(":", 1)[1])  # the pool child training it, alive until the run ends
    worker = next(p for p in stack.procs[:2] if _is_parent_of(p.pid, pid))
    events_of(client, stack, parent)
    stop_process(worker, signal.SIGTERM, timeout=20)  # only the other worker is left to train the child
    r = client.post(stack.api(f"api/runs/{parent}/fork"), json={"step": 1000, "changes": {"norm": "rms"}})
    assert r.status_code == 201 and r.json()["from_step"] == 1000, r.text
    child = r.json()["id"]
    assert events_of(client, stack, child)[-1]["payload"]["status"] == "completed"
    assert client.get(stack.api(f"api/runs/{child}")).json()["worker_host"] != trained_by


def _stored_past_a_checkpoint(client, stack, run_id: str) -> bool:
    # past a checkpoint after the first step's (step 0's is written before any point is stored)
    steps = [s for s in client.get(stack.api(f"api/runs/{run_id}/checkpoints")).json()["steps"] if s > 0]
    series = client.get(stack.api(f"api/runs/{run_id}/metrics"), params={"names": "train_loss"}).json()
    stored = series["series"].get("train_loss", {}).get("step") or [0]
    return bool(steps) and stored[-1] >= steps[0]


def _is_parent_of(ppid: int, pid: int) -> bool:
    """Whether `pid` is `ppid` or a process below it (a worker's pool child trains its run)."""
    while pid > 1:
        if pid == ppid:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False
