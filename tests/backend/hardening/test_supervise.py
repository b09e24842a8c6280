"""`normlab up` supervises its workers: a killed worker is reaped (no zombie), started again, and health
says how many are alive; queued runs then train instead of waiting forever."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.service import running_lab

pytestmark = pytest.mark.slow
TINY = {"task": "digits", "steps": 10, "hidden_size": 16, "eval_every": 5}


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)
    return value


def test_up_restarts_killed_workers_reaps_them_and_health_reports_them(tmp_path):
    with running_lab(tmp_path, workers=2, lost_after_s=3) as lab, httpx.Client(timeout=30) as client:
        health = client.get(lab.api("api/health")).json()
        assert health["workers"] == {"configured": 2, "alive": 2, "restarts": 0, "warm": True}
        assert health["status"] == "ok" and health["broker_reachable"] is True
        up = lab.procs[0].pid
        workers = _children(up)
        assert len(workers) == 2
        for pid in workers:  # both at once: nothing left to train with
            os.killpg(pid, signal.SIGKILL)
        # reaped (no zombie left behind), then replaced by new processes
        _wait(lambda: all(_state(p) is None for p in workers), 30, "reaping of the killed workers")
        _wait(lambda: client.get(lab.api("api/health")).json()["workers"]["restarts"] >= 2, 30, "restarts")
        assert not set(_children(up)) & set(workers)
        r = client.post(lab.api("api/runs"), json=TINY)
        assert r.status_code == 201, r.text
        run_id = r.json()["id"]
        done = _wait(
            lambda: (
                (run := client.get(lab.api(f"api/runs/{run_id}")).json())["status"]
                in ("completed", "failed", "lost")
                and run
            ),
            180,
            "end of the run submitted after the restarts",
        )
        assert done["status"] == "completed"
        health = client.get(lab.api("api/health")).json()
        assert health["workers"]["alive"] == 2 and health["status"] == "ok"
        log = (tmp_path / "up.log").read_text()
        assert "exited with -9" in log and "starting it again" in log
