"""The GPU check (benchmarks/gpu_check.py): fits its lease, and reports every step however it ended."""

import json
import subprocess
import sys
from pathlib import Path

from benchmarks import gpu_check


def test_the_caps_leave_45_seconds_of_the_recommended_lease():
    assert sum(gpu_check.CAPS.values()) <= gpu_check.RECOMMENDED_TIMEOUT_S - 45
    assert list(gpu_check.CAPS) == list(gpu_check.STEPS)  # every step has a cap, in the run's order
    assert list(gpu_check.STEPS)[:3] == ["tests", "lstm", "ln"]  # correctness, then the two targets


def test_a_cpu_dry_run_reports_every_step_in_few_files(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", str(tmp_path), "--json"],
        cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    status = json.loads((tmp_path / "status.json").read_text())
    assert {n: s["state"] for n, s in status["steps"].items()} == dict.fromkeys(gpu_check.STEPS, "skipped")
    assert len(list(tmp_path.iterdir())) <= 8


def test_a_cut_or_failing_step_is_recorded_and_the_next_still_runs(tmp_path, monkeypatch):
    def cut(step, scale):
        step.row(partial=1)
        raise gpu_check.Cut("lstm: cap reached")

    def fails(step, scale):
        raise RuntimeError("misaligned address")

    ran = []
    monkeypatch.setattr(
        gpu_check, "STEPS", {"tests": fails, "lstm": cut, "ln": lambda s, sc: ran.append(s.name)}
    )
    status: dict = {"steps": {}}
    gpu_check.run_steps(["tests", "lstm", "ln"], tmp_path, 1.0, True, status)
    on_disk = json.loads((tmp_path / "status.json").read_text())["steps"]
    assert {n: s["state"] for n, s in on_disk.items()} == {"tests": "failed", "lstm": "cut", "ln": "done"}
    assert "misaligned address" in on_disk["tests"]["why"] and ran == ["ln"]
    assert "misaligned address" in (tmp_path / "errors.log").read_text()
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert rows == [{"step": "lstm", "partial": 1}]  # what a cut step measured is kept
