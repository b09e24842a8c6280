"""`normlab up`'s start: one worker per core by default (--workers still wins), and the URL printed
before the workers have warmed up (they finish in the background; a run queued meanwhile cuts one
worker's warm-up short)."""

from __future__ import annotations

import os
import socket
import threading

from normlab.cli import build_parser, serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_workers_default_to_the_cores_this_process_may_use():
    assert build_parser().parse_args(["up"]).workers is None
    assert build_parser().parse_args(["up", "--workers", "3"]).workers == 3
    assert serve.default_workers() == max(1, min(16, len(os.sched_getaffinity(0))))


def test_the_url_is_printed_while_the_workers_still_warm(monkeypatch, tmp_path, capsys):
    warm = threading.Event()
    started: list[int] = []
    seen: dict[str, str] = {}
    monkeypatch.setenv("NORMLAB_DATA_DIR", str(tmp_path))

    class Pool:  # the supervised workers, none started for real
        def __init__(self, n, start_one, say):
            started.append(n)
            self.procs = []

        def state(self):
            return {"configured": 0, "alive": 0, "restarts": 0}

        def start_watching(self):
            pass

        def stop(self, how):
            pass

    class App:
        state = type("State", (), {})()

    monkeypatch.setattr(serve, "WorkerPool", Pool)
    monkeypatch.setattr(serve, "wait_ready", lambda procs: warm.wait(30) and [])  # still warming
    monkeypatch.setattr(serve, "app_with_pages", lambda settings: App())

    def fake_serve(app, host, port):
        seen["printed"] = capsys.readouterr().out
        seen["warm"] = str(warm.is_set())
        seen["health"] = str(app.state.workers()["warm"])  # /api/health says the workers still warm

    monkeypatch.setattr(serve, "_serve", fake_serve)
    try:
        assert serve.cmd_up(build_parser().parse_args(["up", "--port", str(free_port())])) == 0
    finally:
        warm.set()
    assert "normlab is running at http://" in seen["printed"] and seen["warm"] == "False"
    assert seen["health"] == "False"
    assert started == [serve.default_workers()]
