"""`normlab up` (API + front end + workers on one origin), `normlab api`, `normlab frontend`,
`normlab worker`: the service, all together or part by part."""

from __future__ import annotations

import argparse
import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from normlab.cli import CLIError, settings_from
from normlab.cli.supervise import WorkerPool
from normlab.lifeline import die_with_parent

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import ASGIApp

    from normlab.cli import Subcommands
    from normlab.settings import Settings

READY_TIMEOUT_S = 180.0  # a worker's start and warm-up; past it `up` serves anyway (runs then wait)


def register(sub: Subcommands) -> None:
    p = sub.add_parser("up", help="start the lab: API and pages on one origin, workers, SQLite (embedded)")
    _common(p, port=8050)
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes, one run each at a time (default: one per CPU core, at most 16)",
    )
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("api", help="start the HTTP API only (uses NORMLAB_* settings)")
    _common(p, port=8000)
    p.add_argument("--with-frontend", action="store_true", help="also mount the pages at /")
    p.set_defaults(func=cmd_api)

    p = sub.add_parser("frontend", help="start the Dash pages only (NORMLAB_API_URL says where the API is)")
    _common(p, port=8050)
    p.add_argument("--api-url", default=None, help="the API's base URL, e.g. http://api:8000")
    p.set_defaults(func=cmd_frontend)

    p = sub.add_parser(
        "worker", help="start one training worker (one run at a time; pin a GPU with CUDA_VISIBLE_DEVICES)"
    )
    p.add_argument("--data-dir", default=None)
    p.add_argument("--name", default="worker", help="worker name (unique per machine)")
    p.add_argument("--loglevel", default="info")
    p.add_argument(
        "--ready-fd",
        type=int,
        default=None,
        help="write one byte to this file descriptor once warm and consuming (`normlab up`)",
    )
    p.set_defaults(func=cmd_worker)


def _common(p: argparse.ArgumentParser, port: int) -> None:
    p.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help=f"port (default NORMLAB_PORT, else {port})")
    p.set_defaults(default_port=port)
    p.add_argument(
        "--data-dir", default=None, help="where the SQLite store and queue live (default ~/.normlab)"
    )


def _listen(args: argparse.Namespace, settings: Settings) -> tuple[str, int]:
    host = args.host or settings.host
    # --port, else NORMLAB_PORT, else the command's own default
    port = next(p for p in (args.port, settings.port, args.default_port) if p is not None)
    if not 1 <= port <= 65535:
        raise CLIError(f"--port must be between 1 and 65535, got {port}")
    with socket.socket() as s:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
        except OSError as exc:
            raise CLIError(f"cannot listen on {host}:{port} ({exc.strerror}); pass another --port") from exc
    return host, port


def _serve(app: ASGIApp, host: str, port: int) -> None:
    import uvicorn

    # A short graceful period: open SSE streams would otherwise hold Ctrl-C for the default wait.
    uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)
    ).run()


def start_workers(n: int, log_dir: Path, data_dir: Path) -> list[subprocess.Popen[bytes]]:
    """Start n `normlab worker --data-dir data_dir` processes, each in its own process group (stopped
    by stop_workers); the rest of their settings come from the same NORMLAB_* environment."""
    return [start_worker(i, log_dir, data_dir) for i in range(n)]


def start_worker(i: int, log_dir: Path, data_dir: Path) -> subprocess.Popen[bytes]:
    """Start worker slot i (its log: worker-<i+1>.log, appended to across restarts)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_dir / f"worker-{i + 1}.log", "ab")
    ready_r, ready_w = os.pipe()  # the worker writes one byte once it is warm (see wait_ready)
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "normlab",
                "worker",
                "--name",
                f"w{i + 1}-{os.getpid()}",
                "--data-dir",
                str(data_dir),
                "--ready-fd",
                str(ready_w),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            # SIGKILL, not SIGTERM: a SIGTERMed Celery worker shuts down warm, i.e. trains its current
            # run to the end first (minutes) as an orphan. Its pool child dies with it (workers.jobs).
            preexec_fn=functools.partial(die_with_parent, signal.SIGKILL, os.getpid()),
            pass_fds=(ready_w,),
        )
    finally:
        os.close(ready_w)
        log.close()
    proc.ready_fd = ready_r  # type: ignore[attr-defined]
    return proc


def wait_ready(procs: list[subprocess.Popen[bytes]], timeout_s: float = READY_TIMEOUT_S) -> list[int]:
    """Wait until every worker reports itself warm (workers/warm.py: torch's start-up paid once, before
    the pool forks the per-run children), so that the first run after the URL is printed starts at
    once. Returns the pids that did not report (exited, or still starting after timeout_s)."""
    import select

    waiting = {fd: p for p in procs if (fd := getattr(p, "ready_fd", None)) is not None}
    deadline = time.monotonic() + timeout_s
    failed: list[int] = []
    while waiting and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select(list(waiting), [], [], left)
        for fd in readable:
            if not os.read(fd, 1):  # end of file without the byte: the worker exited
                failed.append(waiting[fd].pid)
            os.close(fd)
            waiting.pop(fd).ready_fd = None  # type: ignore[attr-defined]
    for fd, p in waiting.items():
        failed.append(p.pid)
        os.close(fd)
        p.ready_fd = None  # type: ignore[attr-defined]
    return failed


def stop_workers(procs: list[subprocess.Popen[bytes]], grace_s: float = 5.0) -> None:
    """SIGTERM each worker's whole process group (the Celery parent and its pool child), then SIGKILL
    whatever is left after grace_s. A run cut short is reported `lost` by the reaper."""
    for p in procs:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        _signal_group(p, signal.SIGKILL)  # also reaps a pool child whose parent already exited
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _signal_group(p: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def app_with_pages(settings: Settings) -> FastAPI:
    """The API with the Dash pages mounted at "/" on the same origin (`normlab up`, `api --with-frontend`)."""
    from backend.app import create_app
    from backend.fallback import add_api_fallback
    from backend.wsgi import pages_app
    from frontend.app import create_app as create_dash

    app = create_app(settings)
    add_api_fallback(app)  # /api/* that no route takes: JSON 404/405, never the pages' catch-all
    app.mount("/", pages_app(create_dash(api_base="").server))  # after the API's routes: they win
    return app


def check_schema(settings: Settings) -> None:
    """Refuse to serve a store whose schema is older than this normlab's (an empty one is created)."""
    from normlab.store import get_store

    get_store(settings)  # raises SchemaOutOfDate, whose message names `normlab db upgrade`


def default_workers() -> int:
    """One worker per core this process may use (a run trains on one core's worth), 1 to 16."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(16, cores))


def _warm_then_watch(pool: WorkerPool, log_dir: Path, warm: threading.Event) -> None:
    """Once the workers are warm (or late), supervise them: a worker that exits is started again.
    `warm` is set then (/api/health's workers.warm: the next run starts at once)."""
    late = wait_ready(pool.procs)
    warm.set()
    pool.start_watching()
    if late:
        print(
            f"normlab up: worker process(es) {', '.join(map(str, late))} did not report ready; see {log_dir}",
            file=sys.stderr,
            flush=True,
        )


def cmd_up(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.workers is None:
        args.workers = default_workers()
    if args.workers < 0 or args.workers > 16:
        raise CLIError("--workers must be between 0 and 16")
    host, port = _listen(args, settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    check_schema(settings)  # before the workers start
    # The workers first: their warm-up runs while this process builds the app.
    log_dir = settings.data_dir / "logs"
    pool = WorkerPool(
        args.workers,
        functools.partial(start_worker, log_dir=log_dir, data_dir=settings.data_dir),
        lambda line: print(line, file=sys.stderr, flush=True),
    )
    try:
        app = app_with_pages(settings)
        warm = threading.Event()
        app.state.workers = lambda: {**pool.state(), "warm": warm.is_set()}  # /api/health reports them
        # the URL now; the workers finish warming in the background (a run queued meanwhile cuts one
        # worker's warm-up to what it needs: workers/warm.py)
        threading.Thread(target=_warm_then_watch, args=(pool, log_dir, warm), daemon=True).start()
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        print(
            f"normlab is running at http://{shown}:{port}/  (API docs: /api/docs; data: "
            f"{settings.data_dir}; {args.workers} worker(s), logs in {settings.data_dir / 'logs'}). "
            "Press Ctrl-C to stop.",
            flush=True,
        )
        _serve(app, host, port)
    finally:
        pool.stop(stop_workers)
        print("normlab stopped.", flush=True)
    return 0


def cmd_api(args: argparse.Namespace) -> int:
    from backend.app import create_app

    settings = settings_from(args)
    host, port = _listen(args, settings)
    check_schema(settings)
    print(f"normlab API at http://{host}:{port}/api (docs: /api/docs)", flush=True)
    _serve(app_with_pages(settings) if args.with_frontend else create_app(settings), host, port)
    return 0


def cmd_frontend(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    from backend.wsgi import pages_app
    from frontend.app import create_app as create_dash

    host, port = _listen(args, settings)
    print(f"normlab pages at http://{host}:{port}/ (API: {settings.api_url or 'same origin'})", flush=True)
    _serve(pages_app(create_dash(api_base=settings.api_url).server), host, port)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from workers.celery_app import create_app

    settings = settings_from(args)
    app = create_app(settings)
    app.normlab_ready_fd = args.ready_fd  # read by workers/warm.py
    app.worker_main(
        [
            "worker",
            "--concurrency=1",
            "--prefetch-multiplier=1",
            "-Q",
            settings.queue,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            f"--loglevel={args.loglevel}",
            "-n",
            f"{args.name}@%h",
        ]
    )
    return 0
