"""After a database outage every live run gets a whole staleness window before the reaper may call it
lost, also when the reaper's own look did not fail but hung through the outage and answered after it
(a call the deadline did not cut), and a heartbeat that lands between the look and the marking keeps
its run running."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from backend.reaper import mark_lost, reaper_loop

LOST_AFTER_S, HEARTBEAT_S = 1.0, 0.1


class _Lab:
    """Workers that beat every HEARTBEAT_S while the database is there (they need `reconnect_s` to get
    through again after it returns) and a store whose calls hang while it is away."""

    timeout_s = 0.3

    def __init__(self, runs: tuple[str, ...], reconnect_s: float):
        self.beats = dict.fromkeys(runs, time.time())
        self.dead: set[str] = set()
        self.lost: list[str] = []
        self.back = threading.Event()
        self.back.set()
        self.back_at = 0.0
        self.reconnect_s = reconnect_s
        self._stop = threading.Event()
        threading.Thread(target=self._workers, daemon=True).start()

    def _workers(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            if self.back.is_set() and time.monotonic() >= self.back_at + self.reconnect_s:
                for run in self.beats:
                    if run not in self.dead and run not in self.lost:
                        self.beats[run] = time.time()

    def outage(self, seconds: float) -> None:
        self.back.clear()
        time.sleep(seconds)  # the outage itself
        self.back_at = time.monotonic()
        self.back.set()

    def ping(self) -> None:
        self.back.wait()

    def stale_runs(self, older_than: float) -> list[str]:
        self.back.wait()  # hangs through the outage, then answers with the cutoff it was given
        return [r for r, t in self.beats.items() if t < older_than and r not in self.lost]

    def finish_with_status(self, run_id, status, message, only_from, stale_before=None):
        if run_id in self.lost or (stale_before is not None and self.beats[run_id] >= stale_before):
            return None
        self.lost.append(run_id)
        return {"status": status}

    def stop(self) -> None:
        self._stop.set()


def _reap_while(lab: _Lab, scenario) -> None:
    async def main():
        task = asyncio.create_task(reaper_loop(lab, LOST_AFTER_S, heartbeat_s=HEARTBEAT_S, call_bound_s=30))
        await asyncio.to_thread(scenario)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    try:
        asyncio.run(main())
    finally:
        lab.back.set()
        lab.stop()


def _until(condition, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_a_look_that_hung_through_the_outage_gives_every_run_a_window():
    lab = _Lab(("a", "b"), reconnect_s=0.5)  # within the window (≈ 1.2 s), not within one period

    def scenario():
        time.sleep(0.5)  # the reaper is looking normally
        lab.outage(2.5)  # longer than the loss timeout
        assert not _until(lambda: lab.lost, LOST_AFTER_S + 1.5), f"live runs called lost: {lab.lost}"
        lab.dead.add("b")  # a worker that really dies afterwards is still found
        assert _until(lambda: lab.lost == ["b"], LOST_AFTER_S + 3.0), lab.lost

    _reap_while(lab, scenario)
    assert lab.lost == ["b"]


def test_a_heartbeat_between_the_look_and_the_marking_keeps_the_run():
    lab = _Lab(("a",), reconnect_s=0.0)
    lab.stop()
    lab.beats["a"] = time.time() - 10  # stale when looked at
    assert lab.stale_runs(time.time() - LOST_AFTER_S) == ["a"]
    lab.beats["a"] = time.time()  # its worker gets a heartbeat through just then
    assert not mark_lost(lab, "a", LOST_AFTER_S)
    assert lab.lost == []
