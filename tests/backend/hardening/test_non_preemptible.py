"""An admin may mark a preset or a sweep non-preemptible: its runs never yield their workers to an
interactive run (backend/yields.py); anyone else asking for it is refused (403), a value that is not a
boolean is a 422, and nothing else about the order changes."""

from __future__ import annotations

import pytest

from backend.yields import ask_yields
from normlab.presets import PRESETS

SPEC = {"task": "digits", "steps": 20}
PRESET = next(iter(PRESETS))


def _launch_preset(client, headers, **body):
    return client.post(f"/api/presets/{PRESET}", json={"seeds": [0], "steps": 20, **body}, headers=headers)


def test_only_an_admin_marks_a_preset_or_a_sweep_non_preemptible(make_client, tokens):
    client = make_client(auth="tokens")
    alice, root = tokens("alice"), tokens("root", admin=True)
    r = _launch_preset(client, alice, non_preemptible=True)
    assert r.status_code == 403 and "Only an admin" in r.json()["detail"]
    r = client.post(
        "/api/sweeps", json={"base": SPEC, "seeds": [0, 1], "non_preemptible": True}, headers=alice
    )
    assert r.status_code == 403 and "sweep non-preemptible" in r.json()["detail"]
    assert client.get("/api/runs").json()["total"] == 0  # nothing was queued by the refused launches
    r = _launch_preset(client, root, non_preemptible="very")
    assert r.status_code == 422 and "non_preemptible" in r.text
    r = _launch_preset(client, root, non_preemptible=True)
    assert r.status_code == 201, r.text
    assert client.app.state.store.get_group(r.json()["group_id"]).meta.non_preemptible is True
    r = client.post(
        "/api/sweeps", json={"base": SPEC, "seeds": [0, 1], "non_preemptible": True}, headers=root
    )
    assert r.status_code == 201, r.text
    assert _launch_preset(client, alice).status_code == 201  # unmarked: anyone


def test_a_marked_groups_runs_are_never_asked_to_yield(make_client, tokens):
    client = make_client(auth="tokens")
    root = tokens("root", admin=True)
    store = client.app.state.store
    pinned = client.post(
        "/api/sweeps", json={"base": SPEC, "seeds": [0], "non_preemptible": True}, headers=root
    ).json()["run_ids"]
    plain = client.post("/api/sweeps", json={"base": SPEC, "seeds": [0]}, headers=root).json()["run_ids"]
    for run_id in [*plain, *pinned]:  # the marked run started last: the youngest
        assert store.claim(run_id, "w") is not None
    lab = client.post("/api/runs", json=SPEC, headers=root).json()["id"]
    # two workers, both on batch work: the interactive run is served at once, by the unmarked run
    assert ask_yields(store, set(), workers=2) == plain
    two_labs = client.post("/api/runs", json=SPEC, headers=root).json()["id"]
    assert ask_yields(store, set(plain), workers=2) == []  # the marked run yields to neither
    assert {lab, two_labs} <= {r["id"] for r in store.queue_rows()[0]}


def test_the_client_sends_the_mark(make_client, tokens):
    from normlab_client import Client, NormlabError

    client = make_client(auth="tokens")
    alice, root = tokens("alice"), tokens("root", admin=True)

    def lab(headers):
        token = headers["Authorization"].removeprefix("Bearer ")
        return Client("http://testserver", token=token, transport=client._transport)

    group = lab(root).sweep({"task": "digits", "steps": 20}, seeds=[0, 1], non_preemptible=True)
    assert client.app.state.store.get_group(group.id).meta.non_preemptible is True
    group = lab(root).preset(PRESET, seeds=[0], steps=20, non_preemptible=True)
    assert client.app.state.store.get_group(group.id).meta.non_preemptible is True
    with pytest.raises(NormlabError, match="Only an admin"):
        lab(alice).preset(PRESET, seeds=[0], steps=20, non_preemptible=True)


def test_the_mark_is_stored_before_any_run_of_the_group_is_queued_for_a_worker(
    make_client, tokens, monkeypatch
):
    import backend.runs_common

    client = make_client(auth="tokens")
    root = tokens("root", admin=True)
    store = client.app.state.store
    seen = []

    def enqueue(settings, run_id):  # what the yield watch would read once a worker could take the run
        seen.append(store.pinned_groups({store.get_run(run_id)["group_id"]}) != set())

    monkeypatch.setattr(backend.runs_common, "enqueue_run", enqueue)
    assert _launch_preset(client, root, non_preemptible=True).status_code == 201
    r = client.post(
        "/api/sweeps", json={"base": SPEC, "seeds": [0, 1], "non_preemptible": True}, headers=root
    )
    assert r.status_code == 201
    assert seen and all(seen)
