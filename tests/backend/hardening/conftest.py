"""Fixtures for the hardening tests: in-process APIs (SQLite in tmp_path) with tokens, live stacks
(`normlab api` + real workers), a disposable redis-server, and a TCP proxy that can take PostgreSQL
away and give it back."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.auth import TokenStore
from benchmarks.service import service_env, start_api, start_worker, stop_process
from benchmarks.service_faults import RedisServer, TCPProxy
from normlab.settings import Settings

TINY = {"task": "digits", "steps": 30, "hidden_size": 16, "eval_every": 10}


@pytest.fixture
def make_client(tmp_path):
    """A factory: TestClient over create_app(Settings(data_dir=tmp_path, **overrides))."""
    made = []

    def make(**overrides) -> TestClient:
        settings = Settings(data_dir=tmp_path, queue=f"nlh{len(made)}", **overrides)
        client = TestClient(create_app(settings))
        client.__enter__()
        made.append(client)
        return client

    yield make
    for c in made:
        c.__exit__(None, None, None)


@pytest.fixture
def tokens(tmp_path):
    """Create tokens in the same store: tokens("alice") -> headers dict."""
    from normlab.store import get_store

    store = TokenStore(get_store(Settings(data_dir=tmp_path)))

    def make(user: str, admin: bool = False) -> dict[str, str]:
        _id, token = store.create(user, admin=admin)
        return {"Authorization": f"Bearer {token}"}

    make.store = store
    return make


# ---- live stacks (real `normlab api` + real Celery worker processes) -------------------------------
@dataclass
class LiveStack:
    url: str
    data_dir: Path
    env: dict
    api_proc: subprocess.Popen
    workers: list = field(default_factory=list)

    def api(self, path: str) -> str:
        return self.url + path.lstrip("/")

    def add_worker(self, ready: bool = False) -> subprocess.Popen:
        """Start one more worker; `ready`: return once it is warm and consuming (a free worker)."""
        name = f"w{len(self.workers)}"
        self.workers.append(start_worker(self.data_dir, self.env, name, ready_timeout=180 if ready else None))
        return self.workers[-1]

    def submit(self, client: httpx.Client, headers=None, **spec) -> str:
        r = client.post(self.api("api/runs"), json={**TINY, **spec}, headers=headers or {})
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def wait_status(self, client: httpx.Client, run_id: str, statuses, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            run = client.get(self.api(f"api/runs/{run_id}")).json()
            if run["status"] in statuses or time.monotonic() > deadline:
                return run
            time.sleep(0.1)

    def stop(self) -> None:
        import contextlib
        import os

        for p in self.workers:  # disposable: no warm shutdown (it waits for the run in progress)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        stop_process(self.api_proc, signal.SIGTERM, timeout=10)


def start_stack(data_dir: Path, workers: int = 1, **settings) -> LiveStack:
    """`normlab api` + `workers` × `normlab worker` with a queue of their own; fast lost detection."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fast = {"lost_after_s": 2.0, "worker_heartbeat_s": 0.3}
    env = service_env(data_dir, queue=f"nlh-{uuid.uuid4().hex[:8]}", **{**fast, **settings})
    stack = LiveStack("", data_dir, env, None)  # type: ignore[arg-type]
    for _ in range(workers):
        stack.add_worker()
    stack.url, stack.api_proc = start_api(data_dir, env)
    return stack


@pytest.fixture
def live_stack(tmp_path):
    made: list[LiveStack] = []

    def make(workers: int = 1, **settings) -> LiveStack:
        made.append(start_stack(tmp_path / f"stack{len(made)}", workers, **settings))
        return made[-1]

    yield make
    for s in made:
        s.stop()


@pytest.fixture
def client():
    # Idle connections are dropped after 1 s, before uvicorn closes its own at 5 s: a request sent on a
    # connection the server is closing fails with "Server disconnected" (seen after a 5 s worker start).
    with httpx.Client(timeout=30, limits=httpx.Limits(keepalive_expiry=1.0)) as c:
        yield c


@pytest.fixture
def disposable_redis():
    """A redis-server of our own on a free port (no persistence): (url, restart)."""
    redis = RedisServer()

    def restart(pause_s: float = 1.0):
        redis.down()
        time.sleep(pause_s)
        redis.up()

    redis.up()
    yield redis.url, restart
    redis.down()


@pytest.fixture
def pg_proxy():
    proxy = TCPProxy(5432)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def tokens_for():
    """Tokens in a live stack's store: tokens_for(stack, "ada", "grace") -> {name: headers}."""
    from normlab.store import Store

    stores = []

    def make(stack: LiveStack, *names: str, admin: bool = False) -> dict[str, dict]:
        url = stack.env.get("NORMLAB_DATABASE_URL") or f"sqlite:///{stack.data_dir / 'normlab.sqlite'}"
        stores.append(Store(url))
        ts = TokenStore(stores[-1])
        return {n: {"Authorization": f"Bearer {ts.create(n, admin=admin)[1]}"} for n in names}

    yield make
    for s in stores:
        s.dispose()
