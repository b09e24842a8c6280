"""The GPU check (benchmarks/gpu_check.py): fits its lease, and reports every step however it ended."""

import json
import subprocess
import sys
from pathlib import Path

from benchmarks import gpu_check


def test_the_caps_leave_45_seconds_of_the_recommended_lease():
    assert gpu_check.CAPS_TOTAL == sum(gpu_check.CAPS[name] for name in gpu_check.DEFAULT_STEPS)
    assert gpu_check.CAPS_TOTAL <= gpu_check.RECOMMENDED_TIMEOUT_S - 45 == 375  # a 7-minute lease
    assert list(gpu_check.CAPS) == list(gpu_check.STEPS)  # every step has a cap
    assert set(gpu_check.DEFAULT_STEPS) <= set(gpu_check.STEPS)
    # correctness, then the backward's excess explained, then the LayerNorm targets; LSTM as a guard
    assert gpu_check.DEFAULT_STEPS == ("tests", "probe", "ln", "host", "lstm")


def test_a_cpu_dry_run_reports_every_step_in_few_files(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", str(tmp_path), "--json"],
        cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    status = json.loads((tmp_path / "status.json").read_text())
    assert {n: s["state"] for n, s in status["steps"].items()} == dict.fromkeys(
        gpu_check.DEFAULT_STEPS, "skipped"
    )
    assert len(list(tmp_path.iterdir())) <= 8


def test_every_step_runs_its_calibration_in_the_results_folder(tmp_path, monkeypatch):
    # The dispatch's cache belongs to the run: a check must neither read a user's choices nor leave its own.
    import kernels

    built = []
    monkeypatch.setattr(kernels, "make_calibrator", lambda cache_dir=None, **kw: built.append(cache_dir) or 1)
    step = gpu_check.Step("ln", 10, tmp_path)
    assert gpu_check._calibrator(step) == 1 and built == [tmp_path / "calibration"]


def test_percentages_are_of_the_copy_ceiling_and_of_peak():
    # fwd moves 2·M·N·2 bytes: M·N = 2^20 bf16 in 4.194304 µs is 1000 GB/s
    row = {"M": 1024, "N": 1024, "ours": {"fwd_us": 4.194304, "bwd_us": 6.291456}, "eager": {},
           "compile": {}, "kernels_only": {"fwd_us": 8.388608},
           "kernels_graph": {"fwd_us": None}}  # fmt: skip
    gpu_check._percentages(row, ceiling_gbs=800.0, peak_gbs=1000.0)
    assert (
        round(row["ours"]["fwd_pct_ceiling"], 6) == 125.0 and round(row["ours"]["fwd_pct_peak"], 6) == 100.0
    )
    assert round(row["ours"]["bwd_pct_ceiling"], 6) == 125.0
    assert round(row["kernels_only"]["fwd_pct_ceiling"], 6) == 62.5
    assert "fwd_pct_ceiling" not in row["kernels_graph"]  # a failed capture has no figure


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
