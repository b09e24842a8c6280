"""Bad bytes in every text field and path parameter — NUL, control characters, invalid UTF-8 — are bad
input (404 / 422 / 400), on SQLite and on PostgreSQL alike: never 503 "database unavailable" (which tells
clients to retry forever), and the SQL's parameters never reach the log."""

from __future__ import annotations

import logging
import uuid

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from backend.app import create_app
from normlab.settings import Settings
from normlab.store.schema import runs

PG_BASE = "postgresql://127.0.0.1:5432/test"
# Percent-encoded, as a client would put them in a URL: NUL, control characters, DEL, invalid UTF-8,
# a lone continuation byte, an overlong encoding of "/", a right-to-left override, CR LF.
BAD = ["%00", "a%00b", "%01", "%7f", "%ff%fe", "%c3%28", "%80", "%c0%af", "%e2%80%ae", "%0d%0a", "%09"]
CONTROL = ("%00", "a%00b", "%01", "%7f")
BODIES = [
    ("/api/runs", {"task": "digits\u0000"}),
    ("/api/runs", {"norm": "\u0000"}),
    ("/api/runs", {"\u0000": 1}),
    ("/api/runs", {"probes": {"enabled": True, "x\u0000": 1}}),
    ("/api/sweeps", {"base": {"task": "\u0000"}}),
    ("/api/sweeps", {"base": {}, "norms": ["\u0000"]}),
    ("/api/runs", {"device": "cuda\u0000"}),
]


@pytest.fixture(params=["sqlite", "postgresql"])
def api(request, tmp_path):
    yield from _api(request.param, tmp_path)


@pytest.fixture
def pg_api(tmp_path):
    yield from _api("postgresql", tmp_path)


def _api(kind: str, tmp_path):
    """A TestClient over the API on SQLite (in tmp_path) or on a PostgreSQL schema of its own."""
    schema = None
    extra = {}
    if kind == "postgresql":
        schema = f"nlbytes_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_BASE, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        extra["database_url"] = f"postgresql+psycopg://127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    app = create_app(Settings(data_dir=tmp_path, queue=f"nlbytes{kind}", **extra))
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            yield client
    finally:
        app.state.store.dispose()
        if schema:
            with psycopg.connect(PG_BASE, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _is_bad_input(r) -> bool:
    return r.status_code in (400, 404, 422) and "retry-after" not in r.headers


def test_bad_bytes_in_paths_queries_and_bodies_are_bad_input(api):
    run_id = api.post("/api/runs", json={"task": "digits", "steps": 10}).json()["id"]
    api.post(f"/api/runs/{run_id}/cancel")  # finished: its event streams end by themselves
    wrong = []
    for bad in BAD:
        for method, path in (
            ("GET", f"/api/runs/{bad}"),
            ("GET", f"/api/runs/{bad}/metrics"),
            ("GET", f"/api/runs/{bad}/export"),
            ("GET", f"/api/runs/{bad}/events"),
            ("POST", f"/api/runs/{bad}/cancel"),
            ("POST", f"/api/runs/{bad}/resubmit"),
            ("DELETE", f"/api/runs/{bad}"),
            ("GET", f"/api/runs?owner={bad}"),
            ("GET", f"/api/runs?group={bad}"),
            ("GET", f"/api/runs?status={bad}"),
            ("GET", f"/api/runs?task={bad}"),
            ("GET", f"/api/runs?norm={bad}"),
            ("GET", f"/api/events?runs={bad}"),
            ("GET", f"/api/events?runs={run_id},{bad}"),
            ("GET", f"/api/runs/{run_id}/metrics?names={bad}"),
            ("GET", f"/api/runs/{run_id}/events?after={bad}"),
            ("GET", f"/api/events?runs={run_id}&after={run_id}:{bad}"),
            ("GET", f"/api/runs/{run_id}/export?format={bad}"),
        ):
            r = api.request(method, path)
            # Invalid UTF-8 arrives as U+FFFD and blanks are skipped in lists: both may be a valid query
            # (200); NUL and control characters never are. Nothing is ever a server error.
            ok = _is_bad_input(r) or (bad not in CONTROL and r.status_code < 300)
            if not ok:
                wrong.append(f"{method} {path} -> {r.status_code} {r.text[:80]}")
    for path, body in BODIES:
        r = api.post(path, json=body)
        if not (_is_bad_input(r) and r.status_code == 422):
            wrong.append(f"POST {path} {body!r} -> {r.status_code} {r.text[:80]}")
    assert not wrong, "\n".join(wrong)
    assert api.get(f"/api/runs/{run_id}").json()["status"] == "cancelled"  # nothing else was touched
    assert api.get("/api/health").status_code == 200


def test_a_refused_value_is_422_and_its_parameters_stay_out_of_the_log(pg_api, caplog):
    """Defence in depth: should bad text ever reach the database, PostgreSQL's refusal (a DataError) is
    answered 422 — not 503 — and the log names the reason without the statement's parameters."""
    api = pg_api
    store = api.app.state.store
    secret = "s3cret-" + uuid.uuid4().hex

    def search_runs(*_args, **_kw):  # what GET /api/runs reads through
        with store.engine.connect() as conn:  # PostgreSQL refuses NUL in text
            conn.execute(select(runs.c.id).where(runs.c.owner == secret + "\x00"))
        return [], 0

    store.search_runs = search_runs
    with caplog.at_level(logging.INFO):
        r = api.get("/api/runs")
    assert r.status_code == 422 and "retry-after" not in r.headers, (r.status_code, r.text)
    assert "NUL" in r.json()["detail"]
    assert secret not in caplog.text and "parameters" not in caplog.text
