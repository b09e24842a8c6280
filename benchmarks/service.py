"""Helpers for tests and benchmarks that need a live normlab: start `normlab up` (or the API and
workers separately) on a free port, and read SSE streams.

Front-end browser tests can reuse `running_lab`:

    from benchmarks.service import running_lab
    with running_lab(tmp_path) as lab:      # `normlab up` on a free port, SQLite in tmp_path, 1 worker
        page.goto(lab.url)                  # pages at lab.url, API at lab.url + "api/..."
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from normlab.feed.redis_feed import RedisPublisher
    from normlab.settings import Settings
    from normlab.store import Store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until `url` answers 200 (raise if the process died or time ran out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} before answering {url}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


def service_env(data_dir: Path | str, **settings) -> dict[str, str]:
    """The environment of a child process: os.environ plus NORMLAB_* for data_dir and `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NORMLAB_")}
    env["NORMLAB_DATA_DIR"] = str(data_dir)
    for key, value in settings.items():
        env[f"NORMLAB_{key.upper()}"] = str(value)
    return env


@dataclass
class Lab:
    """A running normlab: `url` ends with "/"; `procs` are the processes this helper started."""

    url: str
    data_dir: Path
    env: dict[str, str]
    procs: list[subprocess.Popen] = field(default_factory=list)

    def api(self, path: str) -> str:
        return self.url + path.lstrip("/")

    def stop(self) -> None:
        for p in reversed(self.procs):
            stop_process(p)


def stop_process(p: subprocess.Popen, sig: int = signal.SIGINT, timeout: float = 20.0) -> None:
    """Signal a process (its group when it leads one) and wait; SIGKILL the group if it lingers."""
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(sig)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=5)


def spawn(
    args: list[str], env: dict[str, str], log: Path, cwd: Path | None = None, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen:
    """`python -m normlab ARGS` in its own process group, output appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "normlab", *args],
            env=env,
            cwd=cwd,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=pass_fds,
        )


@contextlib.contextmanager
def running_lab(
    data_dir: Path | str,
    workers: int = 1,
    timeout: float = 180.0,
    *,
    isolated: bool = False,
    pythonpath: str | None = None,
    wait_warm: bool = True,
    **settings,
) -> Iterator[Lab]:
    """`normlab up` on a free port with its store in data_dir; stopped (Ctrl-C) on exit.

    `isolated`: run it in data_dir, so that the working folder (which `python -m` puts first on sys.path)
    does not decide whose code runs; `pythonpath` then names it (e.g. another revision's checkout)."""
    data_dir = Path(data_dir)
    port = free_port()
    env = service_env(data_dir, **settings)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    args = ["up", "--port", str(port), "--workers", str(workers)]
    proc = spawn(args, env, data_dir / "up.log", cwd=data_dir if isolated else None)
    lab = Lab(f"http://127.0.0.1:{port}/", data_dir, env, [proc])
    try:
        wait_http(lab.api("api/health"), timeout, proc)
        if wait_warm:  # bench demo times the address, as a person sees it
            _wait_warm(lab.api("api/health"), timeout)
        yield lab
    finally:
        lab.stop()


def _wait_warm(url: str, timeout: float) -> None:
    """Until `normlab up`'s workers are warm (it prints its address before): a test's first run then
    starts at once. A revision whose health does not say (an older checkout) is taken as it is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = httpx.get(url, timeout=10).json().get("workers")
        if not isinstance(workers, dict) or workers.get("warm", True):
            return
        time.sleep(0.2)


def start_api(data_dir: Path, env: dict[str, str], timeout: float = 60.0) -> tuple[str, subprocess.Popen]:
    """`normlab api` on a free port; returns (base URL ending in "/", process)."""
    port = free_port()
    proc = spawn(["api", "--port", str(port)], env, data_dir / "api.log")
    url = f"http://127.0.0.1:{port}/"
    wait_http(url + "api/health", timeout, proc)
    return url, proc


def start_worker(
    data_dir: Path, env: dict[str, str], name: str = "w", ready_timeout: float | None = None
) -> subprocess.Popen:
    """`normlab worker`; with `ready_timeout`, returned once it reports itself warm and consuming (its
    --ready-fd byte, as `normlab up` waits for it): its warm-up takes seconds, more on a loaded machine,
    and a caller timing "a free worker" starts the clock there."""
    args = ["worker", "--name", name, "--loglevel", "warning"]
    if ready_timeout is None:
        return spawn(args, env, data_dir / f"{name}.log")
    import select

    ready_r, ready_w = os.pipe()
    try:
        proc = spawn([*args, "--ready-fd", str(ready_w)], env, data_dir / f"{name}.log", pass_fds=(ready_w,))
    finally:
        os.close(ready_w)
    try:
        readable, _, _ = select.select([ready_r], [], [], ready_timeout)
        if not readable or not os.read(ready_r, 1):
            stop_process(proc, signal.SIGKILL, timeout=5)
            raise RuntimeError(f"worker {name} did not report itself warm within {ready_timeout} s")
    finally:
        os.close(ready_r)
    return proc


@dataclass
class BenchService:
    """A private store (and, in the Redis form, a PostgreSQL schema and a Redis queue) for a benchmark."""

    form: str
    data_dir: Path
    queue: str
    settings: Settings
    store: Store
    publisher: RedisPublisher | None  # in the Redis form
    env: dict[str, str]


@contextlib.contextmanager
def bench_service(form: str, prefix: str, pg_url: str, redis_url: str, **settings) -> Iterator[BenchService]:
    """Fresh settings, store and child-process environment for `form` ('redis' or 'embedded').

    The Redis form gets its own PostgreSQL schema and Redis queue name; all of it is dropped on exit.
    """
    import uuid

    import psycopg

    from normlab.feed.redis_feed import RedisPublisher
    from normlab.settings import Settings
    from normlab.store import Store

    tag = uuid.uuid4().hex[:8]
    data_dir = Path(tempfile.mkdtemp(prefix=f"{prefix}-{form}-"))
    extra: dict = {"queue": f"{prefix}-{tag}", **settings}
    schema = None
    if form == "redis":
        schema = f"{prefix}_{tag}"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        extra.update(
            database_url=f"{pg_url.replace('postgresql://', 'postgresql+psycopg://')}"
            f"?options=-csearch_path%3D{schema}",
            broker_url=redis_url,
            redis_url=redis_url,
        )
    resolved = Settings(data_dir=data_dir, **extra)
    store = Store(resolved.resolved_database_url)
    publisher = RedisPublisher(resolved) if form == "redis" else None
    try:
        yield BenchService(
            form, data_dir, extra["queue"], resolved, store, publisher, service_env(data_dir, **extra)
        )
    finally:
        store.dispose()
        if schema:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
        if publisher is not None:
            keys = list(publisher.client.scan_iter(f"{extra['queue']}*"))
            if keys:
                publisher.client.delete(*keys)


@dataclass
class SSEMessage:
    id: str | None
    event: str
    data: str

    def json(self) -> dict:
        return json.loads(self.data)


def read_until_training(
    client: httpx.Client, url: str, min_events: int, timeout: float = 120.0
) -> list[SSEMessage]:
    """A run's events from its start until at least `min_events` have arrived and the latest is a
    `scalars` event (training is under way); the stream is then closed."""
    seen: list[SSEMessage] = []
    for m in iter_sse(client, url, timeout=timeout):
        seen.append(m)
        if m.event == "scalars" and len(seen) >= min_events:
            break
    return seen


def iter_sse(
    client: httpx.Client,
    url: str,
    headers: dict | None = None,
    timeout: float = 60.0,
    max_events: int | None = None,
) -> Iterator[SSEMessage]:
    """Parse an SSE response into messages (comments and retry lines skipped) until it ends, until
    max_events, or until `timeout` seconds pass (TimeoutError)."""
    deadline = time.monotonic() + timeout
    with client.stream("GET", url, headers=headers or {}, timeout=httpx.Timeout(timeout)) as resp:
        if resp.status_code != 200:
            resp.read()
            raise httpx.HTTPStatusError(
                f"SSE {url}: {resp.status_code} {resp.text[:200]}", request=resp.request, response=resp
            )
        count = 0
        fields: dict[str, str] = {}
        for line in resp.iter_lines():
            if time.monotonic() > deadline:
                raise TimeoutError(f"SSE {url}: no end within {timeout} s")
            if line == "":
                if "data" in fields:
                    yield SSEMessage(fields.get("id"), fields.get("event", "message"), fields["data"])
                    count += 1
                    if max_events is not None and count >= max_events:
                        return
                fields = {}
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            fields[name] = fields[name] + "\n" + value if name == "data" and "data" in fields else value
