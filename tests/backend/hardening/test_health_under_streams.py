"""/api/health answers while many event streams are held open on a real `normlab api`: 60 multiplexed
replays of 10 finished runs' histories (the shape that once starved it), every one open and sending,
none read to its end. Health is answered off the streaming path, so it is not blocked behind them."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from normlab.store import EventRow, Store

pytestmark = pytest.mark.slow

RUNS, EVENTS, STREAMS = 10, 1000, 60


def _finished_runs(store: Store) -> list[str]:
    """RUNS completed runs with EVENTS stored scalars events each (written straight to the store)."""
    ids = [f"hist{i:02d}" for i in range(RUNS)]
    store.create_runs([{"id": r, "spec": {"task": "digits", "norm": "layer"}} for r in ids])
    for run_id in ids:
        rows = [
            EventRow(seq, seq, "scalars", 1.0e9 + seq, json.dumps({"loss": 1.0 / seq, "lr": 0.01}))
            for seq in range(1, EVENTS + 1)
        ]
        store.append_events(run_id, rows, [], 0)
        assert store.finish_with_status(run_id, "completed", "", only_from=("queued",)) is not None
    return ids


def _open_stream(url: str, path: str) -> tuple[socket.socket, bytes]:
    """A raw HTTP/1.1 stream request; return the socket (left open, not read further) and its first
    bytes: the status line and the first events. The server fills the socket's buffers and waits."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: text/event-stream\r\n\r\n".encode())
    first = b""
    while b"data:" not in first:
        chunk = sock.recv(65536)
        assert chunk, f"the stream closed before any event: {first[:200]!r}"
        first += chunk
    return sock, first


def test_health_answers_while_sixty_replays_are_held_open(live_stack):
    stack = live_stack(workers=0, max_streams_per_client=STREAMS + 5)
    store = Store(f"sqlite:///{stack.data_dir / 'normlab.sqlite'}")
    held: list[socket.socket] = []
    try:
        ids = _finished_runs(store)
        path = "/api/events?runs=" + ",".join(ids)
        for _ in range(STREAMS):
            sock, first = _open_stream(stack.url, path)
            held.append(sock)
            assert first.startswith(b"HTTP/1.1 200"), first[:200]
        with httpx.Client(timeout=30) as client:
            # another stream is refused only past the cap: these are all open and counted
            assert client.get(stack.api("api/events"), params={"runs": ids[0]}).status_code == 200
            for _ in range(10):
                health = client.get(stack.api("api/health"))
                assert health.status_code == 200 and health.json()["status"] == "ok", health.text
                assert client.get(stack.api(f"api/runs/{ids[0]}")).json()["status"] == "completed"
    finally:
        for sock in held:
            sock.close()
        store.dispose()
