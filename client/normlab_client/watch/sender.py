"""`Sender`: a watched run's events, sent in order from a background thread; kept while the server is
away and sent again (the server drops what it already stored, by seq), never blocking the loop."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from typing import Any

from normlab_client.errors import NormlabError
from normlab_client.http import Http

log = logging.getLogger("normlab_client.watch")
BATCH = 500  # events per request (the server takes at most 500)
# bytes per request: under the server's default body limit (NORMLAB_MAX_BODY_BYTES, 64 KiB) with room for
# the envelope; a server with a smaller limit answers 413 and the sender halves its requests
BATCH_BYTES = 48 * 1024
RETRY_FIRST_S, RETRY_MAX_S = 0.2, 5.0
HEARTBEAT_S = 5.0  # an idle script still says it is alive (the server declares a silent run lost)


class Sender:
    def __init__(self, http: Http, run_id: str, last_seq: int, max_buffer: int = 1_000_000):
        self.http, self.run_id, self.max_buffer = http, run_id, max_buffer
        self.acked = last_seq  # the server's last stored seq
        self.next_seq = last_seq + 1
        self.refused: str | None = None  # the server's refusal: nothing more is sent
        self.dropped = 0  # events not kept because the buffer was full
        self._buf: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._away_since: float | None = None
        self._max_bytes = BATCH_BYTES
        self._thread = threading.Thread(target=self._loop, name=f"normlab-watch-{run_id}", daemon=True)
        self._thread.start()

    def put(self, step: int, kind: str, payload: dict[str, Any]) -> None:
        with self._cond:
            if self.refused is not None:
                return
            if len(self._buf) >= self.max_buffer:  # bounded memory: the newest are not kept, said once
                if not self.dropped:
                    log.warning(
                        "normlab: %d events wait for the server; newer ones are not kept", len(self._buf)
                    )
                self.dropped += 1
                return
            event = {
                "seq": self.next_seq,
                "step": step,
                "kind": kind,
                "time": time.time(),
                "payload": payload,
            }
            self._buf.append(event)
            self.next_seq += 1
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._buf)

    def close(self, timeout: float = 30.0) -> int:
        """Send what is left (up to `timeout` seconds); returns how many events were not sent."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)
        with self._cond:
            self._closing = True
            left = len(self._buf)
        if left and self.refused is None:
            log.warning("normlab: %d events of run %s were not sent (server away)", left, self.run_id)
        return left

    def _loop(self) -> None:
        delay = RETRY_FIRST_S
        while True:
            with self._cond:
                if not self._buf and not self._closing:
                    self._cond.wait(HEARTBEAT_S)
                batch = self._next_batch()
                closing = self._closing
            if not batch and closing:
                return
            try:
                ack = self.http.request(
                    "POST", f"/api/watched/{self.run_id}/events", json={"events": batch}
                ).json()
            except NormlabError as exc:
                if exc.status is None or exc.status >= 500 or exc.status == 429:  # away or busy: keep, retry
                    self._away(exc)
                    time.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_S)
                    continue
                if exc.status == 413 and len(batch) > 1:  # a server with a smaller body limit
                    self._max_bytes = max(1, self._max_bytes // 2)
                    continue
                if exc.status == 409:  # a gap: ask where the server is, resend from there
                    self._ack(int(self.http.request("GET", f"/api/runs/{self.run_id}").json()["last_seq"]))
                    continue
                self._refuse(str(exc))
                return
            delay = RETRY_FIRST_S
            if self._away_since is not None:
                log.warning("normlab: the server is back; sending the buffered events")
                self._away_since = None
            self._ack(int(ack["last_seq"]))
            if ack.get("status") != "running":  # ended: by our own last event, or cancelled in the lab
                if not (batch and batch[-1]["kind"] == "status" and not self._buf):
                    self._refuse(f"run {self.run_id} is {ack.get('status')} on the server")
                return

    def _next_batch(self) -> list[dict[str, Any]]:
        """The oldest buffered events, at most BATCH and about `_max_bytes` of JSON (at least one)."""
        batch: list[dict[str, Any]] = []
        size = 0
        for event in self._buf:
            size += len(json.dumps(event, default=str)) + 2
            if batch and (len(batch) >= BATCH or size > self._max_bytes):
                break
            batch.append(event)
        return batch

    def _ack(self, last: int) -> None:
        with self._cond:
            self.acked = max(self.acked, last)
            while self._buf and self._buf[0]["seq"] <= self.acked:
                self._buf.popleft()

    def _away(self, exc: NormlabError) -> None:
        if self._away_since is None:
            self._away_since = time.monotonic()
            log.warning("normlab: %s; keeping the events and retrying (training goes on)", exc)

    def _refuse(self, why: str) -> None:
        with self._cond:
            self.refused = why
            self._buf.clear()
        log.warning(
            "normlab: the server refused the watched run's events (%s); training goes on unwatched", why
        )
