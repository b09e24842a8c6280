"""Batch work yields to an interactive run, through real workers: with the only worker on a sweep's run,
a run submitted as from the Lab trains before the sweep's run ends; the sweep's run goes back to the
queue, continues as the same run from its checkpoint, with gap-free events, and ends with the numbers of
the same run undisturbed."""

from __future__ import annotations

import json

import pytest

from benchmarks.service import iter_sse, read_until_training

pytestmark = pytest.mark.slow
BATCH = {"task": "digits", "steps": 3000, "hidden_size": 16, "eval_every": 1000, "checkpoint_every": 500}


def _events(client, stack, run_id) -> list[dict]:
    return [m.json() for m in iter_sse(client, stack.api(f"api/runs/{run_id}/events"), timeout=300)]


def _sweep(client, stack) -> str:
    r = client.post(stack.api("api/sweeps"), json={"base": BATCH, "norms": ["layer"]})
    assert r.status_code == 201, r.text
    return r.json()["run_ids"][0]


def test_a_sweep_run_yields_to_a_lab_run_and_ends_as_if_undisturbed(fresh_stack, client):
    stack = fresh_stack("embedded")
    batch = _sweep(client, stack)
    read_until_training(client, stack.api(f"api/runs/{batch}/events"), 3)
    lab = stack.submit(client)  # interactive: no group
    lab_events = _events(client, stack, lab)
    assert lab_events[-1]["payload"]["status"] == "completed"
    history = _events(client, stack, batch)  # to its end
    assert history[-1]["payload"]["status"] == "completed"
    # the Lab run trained while the sweep's run waited in the queue: it ended before the sweep's run
    assert (
        client.get(stack.api(f"api/runs/{lab}")).json()["finished_at"]
        < client.get(stack.api(f"api/runs/{batch}")).json()["finished_at"]
    )
    assert [e["seq"] for e in history] == list(range(1, len(history) + 1))
    statuses = [e["payload"]["status"] for e in history if e["kind"] == "status"]
    assert statuses == ["running", "queued", "running", "completed"]
    said = [e["payload"].get("phase") for e in history if e["kind"] == "log"]
    assert "yield" in said and "resume" in said
    steps = [e["step"] for e in history if e["kind"] == "scalars"]
    assert steps == sorted(set(steps)) and steps[-1] == 3000  # every reported step once

    again = _sweep(client, stack)  # the same run, undisturbed
    undisturbed = _events(client, stack, again)

    def losses(events):
        return [
            (e["step"], e["payload"]["train_loss"], e["payload"]["val_loss"])
            for e in events
            if e["kind"] == "scalars"
        ]

    assert losses(history) == losses(undisturbed)
    ended = [
        json.dumps(client.get(stack.api(f"api/runs/{r}")).json()["summary"]["metrics"])
        for r in (batch, again)
    ]
    assert ended[0] == ended[1]
