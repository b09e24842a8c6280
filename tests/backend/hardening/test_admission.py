"""Admission is atomic: many concurrent submissions never take a user, or the server, past its cap on
queued + running runs — on SQLite and on PostgreSQL, through a real `normlab api`."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

pytestmark = pytest.mark.slow
PG = "postgresql://127.0.0.1:5432/test"


@pytest.fixture
def database(request):
    """'' (SQLite in the stack's data dir) or a PostgreSQL URL on a schema of its own."""
    if request.param == "sqlite":
        yield {}
        return
    schema = f"nladm_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield {"database_url": f"postgresql+psycopg://127.0.0.1:5432/test?options=-csearch_path%3D{schema}"}
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _storm(stack, headers: dict, n: int) -> list[int]:
    spec = {"task": "digits", "steps": 10, "hidden_size": 16}
    with httpx.Client(timeout=60) as client, ThreadPoolExecutor(n) as pool:
        return list(
            pool.map(
                lambda _: client.post(stack.api("api/runs"), json=spec, headers=headers).status_code, range(n)
            )
        )


@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
def test_concurrent_submits_never_overshoot_the_user_or_server_cap(live_stack, tokens_for, database):
    stack = live_stack(
        workers=0,  # nothing trains: every admitted run stays queued, i.e. active
        auth="tokens",
        max_active_runs_per_user=20,
        max_active_runs=25,
        submit_rate_per_minute=1000,
        **database,
    )
    users = tokens_for(stack, "ada", "bob")
    codes = _storm(stack, users["ada"], 60)
    assert codes.count(201) == 20 and codes.count(429) == 40, codes
    codes = _storm(stack, users["bob"], 30)  # the server's cap: 25 - ada's 20
    assert codes.count(201) == 5 and codes.count(429) == 25, codes
    with httpx.Client() as client:
        listed = client.get(stack.api("api/runs"), params={"status": "queued", "limit": 100}).json()
    assert listed["total"] == 25
