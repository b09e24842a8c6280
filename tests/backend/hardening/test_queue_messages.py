"""The embedded queue: a reader never sees a half-written message, and a worker survives malformed
ones (moved aside to queue/bad, logged) and goes on training the next run."""

from __future__ import annotations

import json
import threading
import time
from queue import Empty

import pytest
from kombu import Connection

from normlab.queue import broker_options
from normlab.settings import Settings


def _channel(tmp_path):
    url, options = broker_options(Settings(data_dir=tmp_path))
    conn = Connection(url, transport_options=options)
    return conn, conn.default_channel, tmp_path / "queue" / "messages"


def test_a_polling_reader_never_sees_a_partly_written_message(tmp_path):
    conn, channel, folder = _channel(tmp_path)
    payload = {"body": "x" * 4_000_000, "headers": {}}  # big enough that a write takes several syscalls
    bad: list[str] = []
    seen = [0]
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            for path in folder.glob("*.q.msg"):
                try:
                    data = path.read_bytes()
                except FileNotFoundError:
                    continue
                seen[0] += 1
                try:
                    json.loads(data)
                except ValueError:
                    bad.append(f"{path.name}: {len(data)} bytes")
                path.unlink(missing_ok=True)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(30):
            channel._put("q", payload)
    finally:
        deadline = time.monotonic() + 30
        while list(folder.glob("*.q.msg")) and time.monotonic() < deadline:
            time.sleep(0.01)
        done.set()
        reader.join()
        conn.release()
    assert seen[0] == 30
    assert bad == []


def test_get_moves_malformed_messages_aside_and_returns_the_next_good_one(tmp_path):
    conn, channel, folder = _channel(tmp_path)
    for i, data in enumerate(
        [b"", b'{"body": "trunc', b"[1, 2]", b"\xff\xfe not utf-8", b"{}", b'{"properties": 1}']
    ):
        (folder / f"{i}_bad.q.msg").write_bytes(data)
    good = {"body": "good", "headers": {}, "properties": {"delivery_tag": "t1"}}
    channel._put("q", good)
    assert channel._get("q") == good
    with pytest.raises(Empty):
        channel._get("q")
    assert sorted(p.name for p in (tmp_path / "queue" / "bad").iterdir()) == [
        f"{i}_bad.q.msg" for i in range(6)
    ]
    assert not list(folder.glob("*.q.msg"))
    conn.release()


@pytest.mark.slow
def test_a_worker_survives_malformed_messages_and_trains_the_next_run(live_stack, client):
    stack = live_stack(workers=1)
    folder = stack.data_dir / "queue" / "messages"
    queue = stack.env["NORMLAB_QUEUE"]
    for i, data in enumerate([b"", b'{"body": "trunc', b"[1, 2]", b"\xff\xfe", b"{}"]):
        (folder / f"0_bad{i}.{queue}.msg").write_bytes(data)  # sorts before any real message
    run_id = stack.submit(client, steps=10)
    run = stack.wait_status(client, run_id, ("completed", "failed"), timeout=90)
    assert run["status"] == "completed", run
    assert stack.workers[0].poll() is None  # the worker is still alive
    assert len(list((stack.data_dir / "queue" / "bad").iterdir())) == 5
    second = stack.submit(client, steps=10)
    assert stack.wait_status(client, second, ("completed",), timeout=60)["status"] == "completed"
