"""Fixtures for the service tests: a fresh PostgreSQL schema and Redis DB/prefix per test session,
and live stacks (API + real Celery worker processes) in the Redis/PostgreSQL and embedded forms."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
import redis

from benchmarks.service import start_api, start_worker, stop_process
from normlab.store import Store

PG_BASE = "postgresql://127.0.0.1:5432/test"
REDIS_BASE = "redis://127.0.0.1:6379"
# The smallest real training run the engine accepts: digits, a 16-unit MLP.
TINY = {"task": "digits", "steps": 30, "hidden_size": 16, "eval_every": 10}


@pytest.fixture(scope="session")
def pg_url():
    """A PostgreSQL URL whose search_path is a schema created for this session (dropped after)."""
    schema = f"nl_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(PG_BASE, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
    except psycopg.OperationalError as exc:  # pragma: no cover - the machine always runs it
        pytest.fail(f"PostgreSQL is not running on 127.0.0.1:5432 ({exc}); bash scripts/test starts it")
    yield f"postgresql+psycopg://127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(scope="session")
def redis_url():
    """A Redis URL on a DB number picked for this session; the keys it wrote are removed after."""
    db = random.randint(1, 15)
    url = f"{REDIS_BASE}/{db}"
    try:
        redis.Redis.from_url(url).ping()
    except redis.RedisError as exc:  # pragma: no cover
        pytest.fail(f"Redis is not running on 127.0.0.1:6379 ({exc}); bash scripts/test starts it")
    yield url


@dataclass
class Stack:
    form: str
    url: str  # API base, ends with "/"
    data_dir: Path
    env: dict
    store: Store
    procs: list

    def api(self, path: str) -> str:
        return self.url + path.lstrip("/")

    def submit(self, client: httpx.Client, **spec) -> str:
        r = client.post(self.api("api/runs"), json={**TINY, **spec})
        assert r.status_code == 201, r.text
        return r.json()["id"]


def stack_env(form: str, data_dir: Path, pg_url: str, redis_url: str) -> dict:
    from benchmarks.service import service_env

    queue = f"nltest-{uuid.uuid4().hex[:8]}"
    fast = {"queue": queue, "lost_after_s": 2.0, "worker_heartbeat_s": 0.3}
    if form == "redis":
        return service_env(data_dir, database_url=pg_url, broker_url=redis_url, redis_url=redis_url, **fast)
    return service_env(data_dir, **fast)


def _start_stack(form: str, data_dir: Path, pg_url: str, redis_url: str, workers: int = 1) -> Stack:
    env = stack_env(form, data_dir, pg_url, redis_url)
    procs = [start_worker(data_dir, env, f"w{i}") for i in range(workers)]
    url, api = start_api(data_dir, env)
    procs.append(api)
    db_url = env.get("NORMLAB_DATABASE_URL") or f"sqlite:///{data_dir / 'normlab.sqlite'}"
    return Stack(form, url, data_dir, env, Store(db_url), procs)


def _stop_stack(stack: Stack) -> None:
    import signal

    for p in stack.procs:
        stop_process(p, signal.SIGTERM, timeout=10)
    stack.store.dispose()
    if stack.form == "redis":
        client = redis.Redis.from_url(stack.env["NORMLAB_REDIS_URL"])
        keys = list(client.scan_iter(f"{stack.env['NORMLAB_QUEUE']}*"))
        if keys:
            client.delete(*keys)


@pytest.fixture(scope="session", params=["redis", "embedded"])
def stack(request, tmp_path_factory, pg_url, redis_url):
    """A live stack per form: `normlab api` + one `normlab worker` (real Celery, real engine)."""
    s = _start_stack(request.param, tmp_path_factory.mktemp(f"stack-{request.param}"), pg_url, redis_url)
    yield s
    _stop_stack(s)


@pytest.fixture
def fresh_stack(tmp_path, pg_url, redis_url):
    """A stack of its own (for tests that kill its worker): returns a factory taking the form."""
    made: list[Stack] = []

    def make(form: str, workers: int = 1) -> Stack:
        made.append(_start_stack(form, tmp_path / form, pg_url, redis_url, workers))
        return made[-1]

    yield make
    for s in made:
        _stop_stack(s)


@pytest.fixture
def client():
    # Idle connections are dropped after 1 s, before uvicorn closes its own at 5 s: a request sent on a
    # connection the server is closing fails with "Server disconnected" (seen after a 5 s worker start).
    with httpx.Client(timeout=30, limits=httpx.Limits(keepalive_expiry=1.0)) as c:
        yield c
