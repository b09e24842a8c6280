"""Replication through the API: POST /api/presets/{name} with {"fresh": K} draws K seeds at launch from
the fresh range and records the group as a fresh draw; GET /api/presets/{name}/replications gives, per
claim, the declared-seed verdict beside the latest fresh draw and how many draws held."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from normlab.replication import FRESH_MIN
from normlab.settings import Settings
from tests.backend.test_groups import finish


@pytest.fixture
def app(tmp_path):
    return create_app(Settings(data_dir=tmp_path, queue="nlreplications", max_steps=5000))


@pytest.fixture
def client(app):
    with TestClient(app) as c:
        yield c


def _runs(client, group_id):
    return client.get("/api/runs", params={"group": group_id}).json()["items"]


def _finish_all(app, client, group_id, layer=0.5, none=0.8, only=None):
    for i, x in enumerate(sorted(_runs(client, group_id), key=lambda x: x["spec"]["seed"])):
        if only is not None and x["spec"]["seed"] not in only:
            continue
        value = (layer if x["spec"]["norm"] == "layer" else none) + 0.01 * (i % 3)
        finish(app, x["id"], [(20, 2.0), (40, value)])


def test_a_fresh_launch_draws_unseen_seeds_and_is_not_the_presets_latest_launch(client):
    declared = client.post("/api/presets/online", json={"steps": 40}).json()
    fresh = client.post("/api/presets/online", json={"fresh": 3, "steps": 40})
    assert fresh.status_code == 201, fresh.text
    seeds = {x["spec"]["seed"] for x in _runs(client, fresh.json()["group_id"])}
    assert len(seeds) == 3 and all(s >= FRESH_MIN for s in seeds)
    latest = {p["name"]: p["latest_group"] for p in client.get("/api/presets").json()}
    assert latest["online"] == declared["group_id"]  # a replication never replaces the card's verdict


@pytest.mark.parametrize(
    ("body", "says"),
    [({"fresh": 2, "seeds": [0, 1]}, "either seeds or fresh"), ({"fresh": 9}, "less than or equal to 8")],
)
def test_a_bad_fresh_launch_is_a_422_that_says_what_to_change(client, body, says):
    r = client.post("/api/presets/online", json=body)
    assert r.status_code == 422 and says in r.text


def test_the_record_puts_the_declared_verdict_beside_the_latest_fresh_draw(app, client):
    assert client.get("/api/presets/fig7/replications").status_code == 404
    declared = client.post("/api/presets/online", json={"steps": 40}).json()["group_id"]
    _finish_all(app, client, declared)
    first = client.post("/api/presets/online", json={"fresh": 3, "steps": 40}).json()["group_id"]
    _finish_all(app, client, first)
    rec = client.get("/api/presets/online/replications").json()
    better = next(c for c in rec["claims"] if c["claim"] == "layer better than none")
    assert rec["declared_seeds"] == [0, 1, 2, 3, 4]
    assert better["declared_seeds"]["holds"] is True and better["declared_seeds"]["group_id"] == declared
    assert better["latest"]["holds"] is True and better["latest"]["group_id"] == first
    assert (better["draws"], better["judged"], better["held"]) == (1, 1, 1)
    # a second draw with one seed in: the latest draw is pending, and it does not count as judged
    second = client.post("/api/presets/online", json={"fresh": 3, "steps": 40}).json()["group_id"]
    seeds = sorted({x["spec"]["seed"] for x in _runs(client, second)})
    _finish_all(app, client, second, only=seeds[:1])
    better = next(
        c
        for c in client.get("/api/presets/online/replications").json()["claims"]
        if c["claim"] == better["claim"]
    )
    assert better["latest"]["group_id"] == second and better["latest"]["holds"] is None
    assert better["latest"]["seeds"] == seeds
    assert (better["draws"], better["judged"], better["held"]) == (2, 1, 1)
