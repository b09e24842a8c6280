"""Live interventions and resume under floods and other users (in-process API, SQLite): a per-run cap
at the edge, a per-user rate, owner-or-admin only, and a stored spec that can never become unreadable
(one that is anyway is answered 409 naming its field, and the run list stays up)."""

from __future__ import annotations

import json
import threading

from sqlalchemy import update

from normlab.settings import Settings
from normlab.store import get_store, lineage
from normlab.store.schema import runs
from normlab_client.spec import MAX_INTERVENTIONS, RunSpec

SPEC = {"task": "digits", "steps": 20}


def submit(client, headers=None, **spec) -> str:
    r = client.post("/api/runs", json={**SPEC, **spec}, headers=headers or {})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def running(tmp_path, client, headers=None, **spec) -> str:
    """A run the (absent) worker has claimed: running, as far as the API can tell."""
    run_id = submit(client, headers, **spec)
    assert get_store(Settings(data_dir=tmp_path)).claim(run_id, "test-worker") is not None
    return run_id


def keep_all(tmp_path, run_id: str) -> None:
    """What the worker does: take the requests and keep each applied one in the spec."""
    store = get_store(Settings(data_dir=tmp_path))
    for n, request in enumerate(lineage.take(store, run_id)):
        lineage.keep_intervention(store, run_id, 5 + n, request["changes"])


def test_a_flood_of_interventions_stops_at_the_cap_and_the_list_stays_up(make_client, tmp_path):
    client = make_client(intervention_rate_per_minute=10_000)
    run_id = running(tmp_path, client, interventions=[{"step": 3, "lr": 0.01}])
    codes = [
        client.post(f"/api/runs/{run_id}/interventions", json={"lr": 0.001 * (i + 1)}).status_code
        for i in range(MAX_INTERVENTIONS + 30)
    ]
    assert codes.count(202) == MAX_INTERVENTIONS - 1  # the spec's own intervention counts too
    assert set(codes[MAX_INTERVENTIONS - 1 :]) == {422}
    r = client.post(f"/api/runs/{run_id}/interventions", json={"lr": 0.5})
    assert "at most 100" in r.json()["detail"] and "interventions" in r.json()["fields"]
    keep_all(tmp_path, run_id)  # every accepted one lands in the spec: still readable, still capped
    run = client.get(f"/api/runs/{run_id}")
    assert run.status_code == 200 and len(run.json()["spec"]["interventions"]) == MAX_INTERVENTIONS
    assert client.post(f"/api/runs/{run_id}/interventions", json={"lr": 0.5}).status_code == 422
    listed = client.get("/api/runs")
    assert listed.status_code == 200 and [r["id"] for r in listed.json()["items"]] == [run_id]


def test_concurrent_interventions_cannot_overshoot_the_cap(make_client, tmp_path):
    client = make_client()
    run_id = running(tmp_path, client)
    store = get_store(Settings(data_dir=tmp_path))
    accepted, refused = [], []

    def ask(i: int) -> None:
        try:
            lineage.ask_intervention(store, run_id, {"lr": 0.001 * (i + 1)})
            accepted.append(i)
        except lineage.TooManyInterventions:
            refused.append(i)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(MAX_INTERVENTIONS + 20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(accepted) == MAX_INTERVENTIONS and len(refused) == 20


def test_keeping_an_intervention_never_makes_the_spec_unreadable(make_client, tmp_path):
    client = make_client()
    full = [{"step": i + 1, "lr": 0.01} for i in range(MAX_INTERVENTIONS)]
    run_id = running(tmp_path, client, interventions=full)
    store = get_store(Settings(data_dir=tmp_path))
    assert not lineage.keep_intervention(store, run_id, 500, {"lr": 0.02})
    spec = RunSpec.model_validate_json(store.get_run(run_id)["spec"])
    assert len(spec.interventions) == MAX_INTERVENTIONS and 500 not in [i.step for i in spec.interventions]


def test_a_run_whose_stored_spec_cannot_be_read_is_a_409_not_a_500(make_client, tmp_path):
    client = make_client()
    good, bad = submit(client), submit(client)
    store = get_store(Settings(data_dir=tmp_path))
    spec = json.loads(store.get_run(bad)["spec"])
    spec["interventions"] = [{"step": i + 1, "lr": 0.01} for i in range(MAX_INTERVENTIONS + 1)]
    store.request_cancel(bad)  # ended: a resubmit is asked for below
    with store.engine.begin() as conn:  # as an older server could leave it
        conn.execute(update(runs).where(runs.c.id == bad).values(spec=json.dumps(spec)))
    listed = client.get("/api/runs")
    assert listed.status_code == 200
    assert [r["id"] for r in listed.json()["items"]] == [good]
    [unreadable] = listed.json()["unreadable"]
    assert unreadable["id"] == bad and "interventions" in unreadable["detail"]
    for r in (
        client.get(f"/api/runs/{bad}"),
        client.get(f"/api/runs/{bad}/export", params={"format": "json"}),
        client.post(f"/api/runs/{bad}/resubmit"),
    ):
        assert r.status_code == 409, r.text
        assert "interventions" in r.json()["fields"] and "cannot be read" in r.json()["detail"]
    assert client.delete(f"/api/runs/{bad}").status_code == 204
    assert client.get("/api/runs").json()["unreadable"] == []


def test_interventions_are_rated_per_user(make_client, tmp_path, tokens):
    client = make_client(auth="tokens", intervention_rate_per_minute=3)
    alice, bob = tokens("alice"), tokens("bob")
    a, b = running(tmp_path, client, alice), running(tmp_path, client, bob)
    for i in range(3):
        assert (
            client.post(f"/api/runs/{a}/interventions", json={"lr": 0.1 + i}, headers=alice).status_code
            == 202
        )
    r = client.post(f"/api/runs/{a}/interventions", json={"lr": 0.9}, headers=alice)
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert "per minute per user" in r.json()["detail"]
    assert client.post(f"/api/runs/{b}/interventions", json={"lr": 0.9}, headers=bob).status_code == 202


def test_only_the_owner_or_an_admin_intervenes_or_resumes(make_client, tmp_path, tokens):
    client = make_client(auth="tokens")
    alice, bob, root = tokens("alice"), tokens("bob"), tokens("root", admin=True)
    run_id = running(tmp_path, client, alice)
    r = client.post(f"/api/runs/{run_id}/interventions", json={"lr": 5.0}, headers=bob)
    assert r.status_code == 403 and "belongs to alice" in r.json()["detail"]
    assert client.post(f"/api/runs/{run_id}/interventions", json={"lr": 5.0}).status_code == 401
    store = get_store(Settings(data_dir=tmp_path))
    assert lineage.take(store, run_id) == []  # bob's request never reached the worker
    assert (
        client.post(f"/api/runs/{run_id}/interventions", json={"lr": 0.2}, headers=alice).status_code == 202
    )
    assert client.post(f"/api/runs/{run_id}/interventions", json={"lr": 0.3}, headers=root).status_code == 202
    assert [r["changes"] for r in lineage.take(store, run_id)] == [{"lr": 0.2}, {"lr": 0.3}]
    store.finish_with_status(run_id, "lost", "The worker was lost.", only_from=("running",))
    r = client.post(f"/api/runs/{run_id}/resume", headers=bob)
    assert r.status_code == 403 and "belongs to alice" in r.json()["detail"]
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "lost"
    r = client.post(f"/api/runs/{run_id}/resume", headers=alice)  # allowed; no checkpoint to resume from
    assert r.status_code == 409 and "no checkpoint" in r.json()["detail"]
