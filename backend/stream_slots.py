"""Caps on open event streams: per client (by address) and for the whole server. Each stream holds a
slot from the moment it is admitted until it ends, however it ends; over a cap the request gets 429
with Retry-After instead of a stream that would slow every other request down."""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import AsyncIterator

from fastapi import HTTPException

RETRY_AFTER_S = 5


class StreamSlots:
    def __init__(self, per_client: int, total: int):
        self.per_client, self.total = per_client, total
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def open_count(self, client: str | None = None) -> int:
        with self._lock:
            return self._open[client] if client is not None else sum(self._open.values())

    def hold(self, client: str, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """`stream`, holding a slot of `client` until it ends or is dropped; 429 when none is free."""
        with self._lock:
            if self._open[client] >= self.per_client:
                raise _too_many(
                    f"This client has {self._open[client]} event streams open and this server allows "
                    f"{self.per_client} per client; close some (one multiplexed stream, GET "
                    "/api/events?runs=a,b,…, serves many runs). NORMLAB_MAX_STREAMS_PER_CLIENT sets the "
                    "limit."
                )
            if sum(self._open.values()) >= self.total:
                raise _too_many(
                    f"This server has {self.total} event streams open, its limit; retry shortly "
                    "(NORMLAB_MAX_STREAMS sets the limit)."
                )
            self._open[client] += 1
        released = threading.Event()

        def release() -> None:
            if not released.is_set():
                released.set()
                with self._lock:
                    self._open[client] -= 1
                    if self._open[client] <= 0:
                        del self._open[client]

        async def held() -> AsyncIterator[bytes]:
            try:
                async for chunk in stream:
                    yield chunk
            finally:
                release()

        gen = held()
        weakref.finalize(gen, release)  # a stream never started (the client left first) frees it too
        return gen


def _too_many(detail: str) -> HTTPException:
    return HTTPException(
        429, {"detail": detail, "fields": {"streams": detail}}, headers={"Retry-After": str(RETRY_AFTER_S)}
    )
