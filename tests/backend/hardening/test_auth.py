"""Auth and ownership with NORMLAB_AUTH=tokens (in-process API, SQLite): who may submit, read, cancel,
delete; tokens kept hashed; public or private reading; `GET /api/me`; the `normlab token` command."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

SPEC = {"task": "digits", "steps": 20}


def submit(client, headers=None, **spec) -> str:
    r = client.post("/api/runs", json={**SPEC, **spec}, headers=headers or {})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_auth_off_asks_for_nothing(make_client):
    client = make_client()
    run_id = submit(client)
    assert client.get(f"/api/runs/{run_id}").json()["owner"] is None
    assert client.post(f"/api/runs/{run_id}/cancel").status_code == 200
    assert client.delete(f"/api/runs/{run_id}").status_code == 204
    me = client.get("/api/me").json()
    assert me["auth"] == "off" and me["user"] is None and me["limits"]["max_steps"] == 20_000


def test_writes_need_a_token_and_runs_carry_their_owner(make_client, tokens):
    client = make_client(auth="tokens")
    alice = tokens("alice")
    r = client.post("/api/runs", json=SPEC)
    assert r.status_code == 401 and "Bearer" in r.json()["detail"]
    assert r.headers["www-authenticate"] == "Bearer"
    r = client.post("/api/runs", json=SPEC, headers={"Authorization": "Bearer nl_not-a-real-token"})
    assert r.status_code == 401 and "unknown or revoked" in r.json()["detail"]
    r = client.post("/api/sweeps", json={"base": SPEC, "seeds": [0, 1]})
    assert r.status_code == 401
    run_id = submit(client, alice)
    assert client.get(f"/api/runs/{run_id}").json()["owner"] == "alice"  # public read (default)
    assert [r["id"] for r in client.get("/api/runs", params={"owner": "alice"}).json()["items"]] == [run_id]
    assert client.post(f"/api/runs/{run_id}/cancel").status_code == 401
    assert client.delete(f"/api/runs/{run_id}").status_code == 401
    me = client.get("/api/me", headers=alice).json()
    assert me["user"] == "alice" and not me["admin"] and me["active_runs"] == 1
    assert me["oldest_queued_position"] == 1


def test_only_the_owner_or_an_admin_cancels_or_deletes(make_client, tokens):
    client = make_client(auth="tokens")
    alice, bob, root = tokens("alice"), tokens("bob"), tokens("root", admin=True)
    a1, a2 = submit(client, alice), submit(client, alice)
    r = client.post(f"/api/runs/{a1}/cancel", headers=bob)
    assert r.status_code == 403 and "belongs to alice" in r.json()["detail"]
    assert client.delete(f"/api/runs/{a1}", headers=bob).status_code == 403
    assert client.get(f"/api/runs/{a1}").json()["status"] == "queued"  # bob changed nothing
    assert client.post(f"/api/runs/{a1}/cancel", headers=alice).json()["status"] == "cancelled"
    assert client.delete(f"/api/runs/{a1}", headers=alice).status_code == 204
    assert client.post(f"/api/runs/{a2}/cancel", headers=root).json()["status"] == "cancelled"
    assert client.delete(f"/api/runs/{a2}", headers=root).status_code == 204
    # resubmitting someone's finished run makes a new run that belongs to the caller
    b1 = submit(client, bob)
    client.post(f"/api/runs/{b1}/cancel", headers=bob)
    r = client.post(f"/api/runs/{b1}/resubmit", headers=alice)
    assert r.status_code == 201
    new = client.get(f"/api/runs/{r.json()['id']}").json()
    assert new["owner"] == "alice" and new["spec"] == client.get(f"/api/runs/{b1}").json()["spec"]


def test_private_reading_needs_a_token_header_or_query(make_client, tokens):
    client = make_client(auth="tokens", public_read=False)
    alice = tokens("alice")
    run_id = submit(client, alice)
    for path in ("/api/runs", f"/api/runs/{run_id}", "/api/catalog", f"/api/runs/{run_id}/export"):
        r = client.get(path)
        assert r.status_code == 401 and "NORMLAB_PUBLIC_READ" in r.json()["detail"], path
        assert client.get(path, headers=alice).status_code == 200, path
    token = alice["Authorization"].split()[1]
    assert client.get(f"/api/runs/{run_id}", params={"token": token}).status_code == 200
    # the query form is for reads (EventSource cannot send headers), never for writes
    assert client.post(f"/api/runs/{run_id}/cancel", params={"token": token}).status_code == 401
    assert client.get("/api/health").status_code == 200  # probes and load balancers
    assert client.get("/api/me").json()["user"] is None
    openapi = client.get("/api/openapi.json").json()
    assert "HTTPBearer" in openapi["components"]["securitySchemes"]


def test_tokens_are_stored_hashed_and_revocation_works(make_client, tokens, tmp_path, monkeypatch):
    import backend.auth as auth

    monkeypatch.setattr(auth, "CACHE_S", 0.0)
    client = make_client(auth="tokens")
    alice = tokens("alice")
    token = alice["Authorization"].split()[1]
    assert token.startswith("nl_") and len(token) > 30
    with sqlite3.connect(tmp_path / "normlab.sqlite") as db:
        stored = db.execute("SELECT token_hash FROM api_tokens").fetchall()
    assert token not in json.dumps(stored) and stored == [(auth.hash_token(token),)]
    submit(client, alice)
    [row] = tokens.store.list()
    assert tokens.store.revoke(token_id=row["id"]) == 1
    r = client.post("/api/runs", json=SPEC, headers=alice)
    assert r.status_code == 401 and "revoked" in r.json()["detail"]


def test_token_command_create_list_revoke(tmp_path):
    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "normlab", "token", *args, "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    made = json.loads(cli("create", "--user", "carol", "--admin", "--json").stdout)
    assert made["user"] == "carol" and made["admin"] and made["token"].startswith("nl_")
    listed = json.loads(cli("list", "--json").stdout)
    assert [(t["id"], t["user"], t["revoked_at"]) for t in listed] == [(made["id"], "carol", None)]
    assert made["token"] not in cli("list").stdout
    assert json.loads(cli("revoke", made["id"], "--json").stdout) == {"revoked": 1}
    again = cli("revoke", made["id"])
    assert again.returncode == 2 and "no active token" in again.stderr
    assert cli("revoke").returncode == 2
