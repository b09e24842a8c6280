"""Smaller edges: a stranger's resubmit never joins the owner's group; /api/* paths no route takes answer
JSON 404/405 (with Allow), not the pages' HTML; bodies the parser refuses name the field; a broker
outage answers 503 with Retry-After."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from normlab.cli.serve import app_with_pages
from normlab.settings import Settings
from normlab.store import get_store

SPEC = {"task": "digits", "steps": 10, "hidden_size": 16}


def test_resubmit_joins_the_group_only_for_its_owner(make_client, tokens, tmp_path):
    client = make_client(auth="tokens", public_read=True)
    ada, bob = tokens("ada"), tokens("bob")
    store = get_store(Settings(data_dir=tmp_path))
    store.create_runs([{"id": "adarun", "spec": SPEC | {"norm": "layer"}, "owner": "ada", "group_id": "g1"}])
    store.finish_with_status("adarun", "failed", "test", only_from=("queued",))
    theirs = client.post("/api/runs/adarun/resubmit", headers=bob)
    assert theirs.status_code == 201, theirs.text
    assert store.get_run(theirs.json()["id"])["group_id"] is None
    assert store.get_run(theirs.json()["id"])["owner"] == "bob"
    mine = client.post("/api/runs/adarun/resubmit", headers=ada)
    assert store.get_run(mine.json()["id"])["group_id"] == "g1"


@pytest.fixture
def lab(tmp_path):
    with TestClient(app_with_pages(Settings(data_dir=tmp_path))) as c:
        yield c


def test_unknown_api_paths_get_json_404_and_wrong_methods_405_with_allow(lab):
    for method in ("GET", "POST", "DELETE", "OPTIONS"):
        r = lab.request(method, "/api/no-such-thing/here")
        assert r.status_code == 404 and r.headers["content-type"] == "application/json", (method, r.text)
        assert "/api/docs" in r.json()["detail"]
    r = lab.options("/api/runs")
    assert r.status_code == 405 and set(r.headers["allow"].split(", ")) >= {"GET", "POST"}
    r = lab.delete("/api/catalog")
    assert r.status_code == 405 and "GET" in r.headers["allow"]
    assert lab.get("/api/health").json()["status"] == "ok"  # real routes still win
    assert lab.get("/").status_code == 200  # and the pages are still served


@pytest.mark.parametrize(
    "body", [b"[" * 30_000 + b"]" * 30_000, b'{"task": "\xff\xfe"}', b"\xef\xbb\xbf\x00\x00"]
)
def test_bodies_the_parser_refuses_say_what_to_send(make_client, body):
    r = make_client().post("/api/runs", content=body, headers={"content-type": "application/json"})
    assert r.status_code in (400, 422), r.text
    assert r.json()["fields"]["body"] and "JSON" in r.json()["fields"]["body"]


def test_a_broker_outage_answers_503_with_retry_after(make_client):
    client = make_client(broker_url="redis://127.0.0.1:1/0")  # nothing listens there
    r = client.post("/api/runs", json=SPEC)
    assert r.status_code == 503 and r.headers["retry-after"], r.text


def test_health_says_degraded_when_the_broker_is_unreachable(make_client):
    h = make_client(broker_url="redis://127.0.0.1:1/0").get("/api/health")
    assert h.status_code == 200  # the API itself answers; what cannot work is named
    assert h.json()["status"] == "degraded" and h.json()["broker_reachable"] is False
    assert "broker" in h.json()["problems"][0]
