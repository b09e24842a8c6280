"""Run names, tags and notes (owner or admin edits) and the runs search (text, tag, owner, task,
normalizer, status, date) through the API, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from backend.app import create_app
from backend.auth import TokenStore
from normlab.settings import Settings
from normlab.store import Store
from normlab.store.schema import runs
from normlab_client.spec import RunSpec

DAY = 86400.0
T0 = 1_780_000_000.0  # 2026-05-28


@pytest.fixture
def lab(db_url, tmp_path):
    """A tokens-on API over a store holding four runs of two owners on different days."""
    settings = Settings(
        data_dir=tmp_path,
        database_url="" if db_url.startswith("sqlite") else db_url,
        auth="tokens",
        public_read=True,
        queue="nllabels",
    )
    store = Store(settings.resolved_database_url)
    specs = {
        "r1": ("ada", RunSpec(task="digits", norm="layer")),
        "r2": ("ada", RunSpec(task="digits", norm="batch", batch_size=8)),
        "r3": ("bob", RunSpec(task="digits", norm="none")),
        "r4": ("bob", RunSpec(task="mnist1d", norm="layer")),
    }
    store.create_runs(
        [{"id": i, "spec": s.resolved().model_dump(mode="json"), "owner": o} for i, (o, s) in specs.items()]
    )
    with store.engine.begin() as conn:
        for day, run_id in enumerate(specs):
            conn.execute(update(runs).where(runs.c.id == run_id).values(created_at=T0 + day * DAY))
        conn.execute(update(runs).where(runs.c.id == "r3").values(status="completed"))
    tokens = TokenStore(store)
    heads = {
        user: {"Authorization": f"Bearer {tokens.create(user, admin=user == 'root')[1]}"}
        for user in ("ada", "bob", "root")
    }
    with TestClient(create_app(settings)) as client:
        yield client, heads
    store.dispose()


def ids(client, **params) -> list[str]:
    r = client.get("/api/runs", params=params)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["total"] == len(body["items"])
    return sorted(run["id"] for run in body["items"])


def test_owner_names_tags_and_notes_a_run_and_others_may_not(lab):
    client, heads = lab
    note = "# Why\nLN *without* gain, to compare with r2.\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    r = client.patch(
        "/api/runs/r1",
        json={"name": "LN baseline", "tags": ["paper", "fig6"], "note": note},
        headers=heads["ada"],
    )
    assert r.status_code == 200, r.text
    assert (r.json()["name"], r.json()["tags"], r.json()["note"]) == ("LN baseline", ["fig6", "paper"], note)
    # Only what is sent changes; null clears.
    r = client.patch("/api/runs/r1", json={"tags": ["paper"]}, headers=heads["ada"])
    assert (r.json()["name"], r.json()["tags"], r.json()["note"]) == ("LN baseline", ["paper"], note)
    r = client.patch("/api/runs/r1", json={"name": None}, headers=heads["ada"])
    assert r.json()["name"] is None and r.json()["note"] == note
    # Someone else: 403 naming the owner; nothing changed. An admin may.
    r = client.patch("/api/runs/r1", json={"name": "mine now"}, headers=heads["bob"])
    assert r.status_code == 403 and "ada" in r.json()["detail"]
    assert client.get("/api/runs/r1").json()["name"] is None
    r = client.patch("/api/runs/r1", json={"name": "kept by root"}, headers=heads["root"])
    assert r.status_code == 200 and r.json()["name"] == "kept by root"
    assert client.patch("/api/runs/r1", json={"name": "x"}).status_code == 401
    assert client.patch("/api/runs/nope", json={"name": "x"}, headers=heads["root"]).status_code == 404


@pytest.mark.parametrize(
    "body, field",
    [
        ({"tags": ["has space"]}, "tags"),
        ({"tags": [f"t{i}" for i in range(17)]}, "tags"),
        ({"name": "two\nlines"}, "name"),
        ({"note": "bell\x07"}, "note"),
        ({"name": "x" * 201}, "name"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_labels_get_422_naming_the_field(lab, body, field):
    client, heads = lab
    r = client.patch("/api/runs/r1", json=body, headers=heads["ada"])
    assert r.status_code == 422 and field in r.json()["fields"], r.text
    assert client.get("/api/runs/r1").json()["tags"] == []


def test_search_by_text_tag_owner_task_norm_status_and_date(lab):
    client, heads = lab
    client.patch(
        "/api/runs/r2", json={"name": "Batch-norm small batch", "tags": ["fig6"]}, headers=heads["ada"]
    )
    client.patch(
        "/api/runs/r4", json={"note": "the 100% run_odd one", "tags": ["fig6", "keep"]}, headers=heads["bob"]
    )
    assert ids(client) == ["r1", "r2", "r3", "r4"]
    assert ids(client, q="BATCH-NORM") == ["r2"]  # any case, in the name
    assert ids(client, q="100%") == ["r4"]  # in the note; % is text, not a wildcard
    assert ids(client, q="_odd") == ["r4"]
    assert ids(client, q="mnist1d") == ["r4"]  # the task
    assert ids(client, tag="fig6") == ["r2", "r4"]
    assert ids(client, tag="keep", owner="bob") == ["r4"]
    assert ids(client, owner="ada", norm="batch") == ["r2"]
    assert ids(client, task="digits", status="completed") == ["r3"]
    assert ids(client, created_after="2026-05-29") == ["r2", "r3", "r4"]  # a date: midnight UTC
    assert ids(client, created_after="2026-05-29T00:00:00Z", created_before="2026-05-31") == ["r2", "r3"]
    assert ids(client, q="nothing like it") == []
    r = client.get("/api/runs", params={"tag": "bad tag"})
    assert r.status_code == 422 and "tag" in r.json()["fields"]
    r = client.get("/api/runs", params={"created_after": "yesterday"})
    assert r.status_code == 422 and "created_after" in r.json()["fields"]
