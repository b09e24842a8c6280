"""`normlab up`: prints its URL, serves API + pages, trains, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.service import free_port, service_env, wait_http

pytestmark = pytest.mark.slow


def descendants(pid: int) -> set[int]:
    """Every live process whose parent chain reaches pid (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    out, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - out
        out |= frontier
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_up_serves_trains_and_ctrl_c_leaves_no_orphans(tmp_path):
    port = free_port()
    env = service_env(tmp_path, lost_after_s=5)
    proc = subprocess.Popen(
        [sys.executable, "-m", "normlab", "up", "--port", str(port), "--workers", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_http(url + "api/health", 180, proc)  # up answers once its workers are warm
        assert httpx.get(url).status_code == 200  # the pages (or the placeholder) at /
        run = httpx.post(
            url + "api/runs", json={"task": "digits", "steps": 20000, "hidden_size": 16, "eval_every": 1000}
        ).json()
        deadline = time.monotonic() + 90
        while httpx.get(url + f"api/runs/{run['id']}").json()["status"] != "running":
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.2)
        children = descendants(proc.pid)
        assert len(children) >= 2  # the Celery worker and its pool child, training
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 15
        assert f"http://127.0.0.1:{port}/" in out and "Ctrl-C" in out
        time.sleep(0.5)
        assert [p for p in children if alive(p)] == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_run_queued_before_up_starts_cuts_one_workers_warm_up_and_trains(tmp_path):
    """The first run does not wait for the whole warm-up (workers/warm.py): queued before `normlab up`
    starts, it is trained by the one worker that cut its warm-up to the core and the run's own task
    (its log says so), while the other worker warms whole. Ordering and logs, not wall time."""
    from normlab.queue import enqueue_run
    from normlab.settings import Settings
    from normlab.store import get_store

    settings = Settings(data_dir=tmp_path)
    get_store(settings).create_runs(
        [{"id": "first", "spec": {"task": "mnist1d", "norm": "layer", "steps": 30}}]
    )
    enqueue_run(settings, "first")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "normlab", "up", "--port", str(port), "--workers", "2"],
        env=service_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_http(url + "api/health", 180, proc)
        deadline = time.monotonic() + 180
        while (run := httpx.get(url + "api/runs/first").json())["status"] not in ("completed", "failed"):
            assert time.monotonic() < deadline, f"the queued run never ended: {run['status']}"
            time.sleep(0.3)
        assert run["status"] == "completed", run["error"]
        deadline = time.monotonic() + 180
        while len(warmed := _warmed_lines(tmp_path / "logs")) < 2:  # the other worker may still warm
            assert time.monotonic() < deadline, warmed
            time.sleep(0.3)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    cut = [name for name, line in warmed.items() if line.endswith("skipped: a run was queued)")]
    assert len(cut) == 1, warmed  # one worker cut its warm-up for the run; the other warmed whole
    whole = next(line for name, line in warmed.items() if name not in cut)
    assert whole.endswith(" 0 skipped)"), warmed
    assert "train_run" in (tmp_path / "logs" / cut[0]).read_text()  # and that one trained it


def _warmed_lines(log_dir: Path) -> dict[str, str]:
    """{worker log name: its 'worker warmed in …' line}, for the workers that finished their warm-up."""
    found = {}
    for log in sorted(log_dir.glob("worker-*.log")):
        lines = [ln.strip() for ln in log.read_text().splitlines() if "worker warmed in" in ln]
        if lines:
            found[log.name] = lines[-1]
    return found
