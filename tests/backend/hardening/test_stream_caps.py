"""Event streams are capped per client and for the server: past a cap the request gets 429 with
Retry-After, and a closed stream gives its slot back (a real `normlab api`)."""

from __future__ import annotations

import contextlib
import time

import httpx
import pytest

from backend.stream_slots import StreamSlots

pytestmark = pytest.mark.slow


def _open(stack, client: httpx.Client, stack_exit: contextlib.ExitStack, run_id: str) -> httpx.Response:
    r = stack_exit.enter_context(client.stream("GET", stack.api(f"api/runs/{run_id}/events")))
    return r


def test_streams_past_the_client_cap_get_429_and_closed_ones_free_their_slot(live_stack):
    stack = live_stack(workers=0, max_streams_per_client=3)  # no worker: the run stays queued, streams open
    with httpx.Client(timeout=30) as client:
        run_id = stack.submit(client, steps=10)
        with contextlib.ExitStack() as held:
            opened = [_open(stack, client, held, run_id) for _ in range(3)]
            assert [r.status_code for r in opened] == [200] * 3
            refused = client.get(stack.api(f"api/runs/{run_id}/events"))
            assert refused.status_code == 429 and refused.headers["retry-after"] == "5"
            assert "NORMLAB_MAX_STREAMS_PER_CLIENT" in refused.json()["fields"]["streams"]
            multi = client.get(stack.api("api/events"), params={"runs": run_id})
            assert multi.status_code == 429
            assert client.get(stack.api("api/health")).status_code == 200  # not a stream: never capped
        deadline = time.monotonic() + 30  # the server notices the closed connections
        while True:
            with client.stream("GET", stack.api(f"api/runs/{run_id}/events")) as again:
                if again.status_code == 200:
                    break
                assert again.status_code == 429
            assert time.monotonic() < deadline, "closed streams never gave their slots back"
            time.sleep(0.2)


async def _chunks(n: int):
    for i in range(n):
        yield str(i).encode()


async def _drain(gen) -> list[bytes]:
    return [c async for c in gen]


def test_server_cap_and_release_on_end_or_drop():
    import asyncio

    from fastapi import HTTPException

    slots = StreamSlots(per_client=10, total=2)
    a = slots.hold("a", _chunks(2))
    b = slots.hold("b", _chunks(2))  # never iterated: dropped below
    with pytest.raises(HTTPException) as exc:
        slots.hold("c", _chunks(1))
    assert exc.value.status_code == 429 and "NORMLAB_MAX_STREAMS" in exc.value.detail["detail"]
    assert asyncio.run(_drain(a)) == [b"0", b"1"]  # ran to its end: slot back
    assert slots.open_count() == 1
    del b  # a stream never started (its client left first) gives its slot back when dropped
    assert slots.open_count() == 0
    assert asyncio.run(_drain(slots.hold("c", _chunks(1)))) == [b"0"]
