"""A run's Server-Sent Events as typed `Event`s, resumed after a dropped connection with Last-Event-ID.

The server numbers a run's events 1, 2, 3, … (the SSE `id:`); after a cut the stream is reopened from
the last id received, so nothing is missed and nothing comes twice (the guard below drops any event at
or below the last id, should a proxy replay one).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx

from normlab_client.errors import NormlabError, from_response
from normlab_client.events import Event


def parse_sse(lines: Iterator[str]) -> Iterator[tuple[str | None, str, str]]:
    """(id, event, data) per message of an SSE text stream; comments and retry lines skipped."""
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "data" in fields:
                yield fields.get("id"), fields.get("event", "message"), fields["data"]
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        fields[name] = fields[name] + "\n" + value if name == "data" and "data" in fields else value


def run_events(
    open_stream: Callable[[dict[str, str]], httpx.Response],
    after: int = 0,
    retries: int = 20,
    backoff_s: float = 0.5,
    on_resume: Callable[[int], None] | None = None,
    deadline: float | None = None,
) -> Iterator[Event]:
    """Events after sequence number `after` until the run's terminal status (or the stream's end).

    `open_stream(headers)` opens the GET (a streaming response); a connection that drops is reopened
    up to `retries` times in a row, from the last event received. Past `deadline` (time.monotonic()),
    TimeoutError, checked on every line received (the server's heartbeats included)."""
    last = after
    failures = 0
    while True:
        headers = {"Accept": "text/event-stream"}
        if last:
            headers["Last-Event-ID"] = str(last)
        try:
            resp = open_stream(headers)
        except httpx.TransportError as exc:
            failures = _failed(failures, retries, backoff_s, exc)
            continue
        try:
            if resp.status_code == 204:  # the run has ended and nothing is left after `last`
                return
            if resp.status_code != 200:
                resp.read()
                raise from_response(resp.status_code, _json(resp), resp.text[:300])
            for sse_id, _kind, data in parse_sse(_until(resp.iter_lines(), deadline)):
                event = Event.model_validate_json(data)
                if event.seq <= last:  # already delivered before a reconnect
                    continue
                last = event.seq if sse_id is None else int(sse_id)
                failures = 0
                yield event
                if event.terminal:
                    return
            # closed before the run's end (a restart, a proxy): reopen; a finished run answers 204
            failures = _failed(failures, retries, backoff_s, None)
        except httpx.TransportError as exc:  # a cut mid-stream: reopen from `last`
            failures = _failed(failures, retries, backoff_s, exc)
            if on_resume is not None:
                on_resume(last)
        finally:
            resp.close()


def _until(lines: Iterator[str], deadline: float | None) -> Iterator[str]:
    for line in lines:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("the run had not ended in time")
        yield line


def _failed(failures: int, retries: int, backoff_s: float, exc: Exception | None) -> int:
    failures += 1
    if failures > retries:
        why = exc or "closed early"
        raise NormlabError(f"The event stream kept failing ({why}); is the server still running?") from exc
    time.sleep(min(backoff_s * failures, 5.0))
    return failures


def _json(resp: httpx.Response) -> object:
    try:
        return resp.json()
    except ValueError:
        return None
