"""Redis Streams side of the live feed: one capped stream per run, entry id = the event's seq.

Entry fields: k = kind, t = "1" for a terminal status event, d = the Event JSON. Because the stream id
is the sequence number, `XREAD` from "<cursor>-0" returns exactly the events after a client's cursor.
"""

from __future__ import annotations

import logging

import redis

from normlab.settings import Settings
from normlab.store import EventRow, event_json
from normlab_client.events import parse_event

log = logging.getLogger(__name__)
STREAM_TTL_S = 7 * 24 * 3600  # the store keeps everything; streams only serve live viewers


def stream_key(settings: Settings, run_id: str) -> str:
    return f"{settings.queue}:events:{run_id}"


def is_terminal_row(row: EventRow) -> bool:
    """Whether a stored event ends its run, read from its typed payload (only status events can)."""
    return row.kind == "status" and parse_event(event_json("", row)).terminal


class RedisPublisher:
    """XADDs a run's events to its capped stream. Failures are logged, never raised: the store is the
    record, and readers fall back to it."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.client = redis.Redis.from_url(settings.redis_url, socket_timeout=5)

    def publish(self, run_id: str, rows: list[EventRow]) -> None:
        if not rows:
            return
        key = stream_key(self.settings, run_id)
        try:
            pipe = self.client.pipeline(transaction=False)
            for row in rows:
                pipe.xadd(
                    key,
                    {"k": row.kind, "t": "1" if is_terminal_row(row) else "0", "d": event_json(run_id, row)},
                    id=f"{row.seq}-0",
                    maxlen=self.settings.feed_maxlen,
                    approximate=True,
                )
            pipe.expire(key, STREAM_TTL_S)
            pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:  # pragma: no cover - exercised by the fault tests
            log.warning("live feed: could not publish %d events of run %s: %s", len(rows), run_id, exc)

    def close(self) -> None:
        self.client.close()
