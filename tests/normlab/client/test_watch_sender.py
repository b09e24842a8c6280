"""The watch sender's requests stay under the server's body limit: batched by bytes as well as by count,
halved on a 413 from a server with a smaller limit, every event sent once and in order."""

from __future__ import annotations

import threading

from normlab_client.errors import NormlabError
from normlab_client.watch.sender import BATCH_BYTES, Sender


class _Server:
    """A stand-in for POST /api/watched/{id}/events with a body limit of `limit` bytes."""

    def __init__(self, limit: int):
        self.limit, self.stored, self.sizes, self.refused = limit, [], [], 0
        self.lock = threading.Lock()

    def request(self, method, path, json=None):  # noqa: A002 (Http's own signature)
        import json as _json

        size = len(_json.dumps(json))
        with self.lock:
            if size > self.limit:
                self.refused += 1
                raise NormlabError("The request body is larger than this server's limit", 413)
            self.sizes.append(size)
            self.stored.extend(
                e["seq"] for e in json["events"] if not self.stored or e["seq"] > self.stored[-1]
            )
            last = self.stored[-1]
        return type("Answer", (), {"json": lambda _self: {"last_seq": last, "status": "running"}})()


def _send(server: _Server, events: int, payload_bytes: int) -> Sender:
    sender = Sender(server, "r", last_seq=1)
    for step in range(events):
        sender.put(step, "log", {"message": "x" * payload_bytes})
    assert sender.close(timeout=30) == 0
    return sender


def test_batches_are_bounded_by_bytes_under_the_default_body_limit():
    server = _Server(limit=64 * 1024)
    sender = _send(server, events=300, payload_bytes=1000)  # ≈ 300 KB in all: one request would be 413
    assert server.refused == 0 and max(server.sizes) <= BATCH_BYTES + 2048
    assert server.stored == list(range(2, 302)) and sender.refused is None


def test_a_smaller_body_limit_halves_the_requests_until_they_fit():
    server = _Server(limit=10 * 1024)
    sender = _send(server, events=60, payload_bytes=1000)
    assert server.refused >= 1 and max(server.sizes) <= 10 * 1024
    assert server.stored == list(range(2, 62)) and sender.refused is None
