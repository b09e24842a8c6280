"""Load: short runs from two users queued over 2 real workers — all finish, none twice, none lost,
FIFO per user; and `normlab bench faults` end to end at a small size. The full figures (100 runs,
500 viewers) come from `normlab bench faults --json`, recorded in BENCHMARKS.md ("Reliability")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks.faults import queue_load

pytestmark = pytest.mark.slow
CI_RUNS = 12  # 100 in the benchmark; 12 keeps CI inside its budget on 2 cores


def test_runs_queued_over_two_workers_finish_once_in_fifo_order_per_user(live_stack, tokens_for):
    stack = live_stack(workers=2, auth="tokens", max_active_runs_per_user=100)
    users = tokens_for(stack, "ada", "grace")
    result = queue_load(stack.url, users, CI_RUNS, workers=2, timeout=600)
    assert result["completed"] == CI_RUNS, result
    assert result["not_finished"] == result["failed_or_lost"] == result["twice"] == 0, result
    assert result["fifo_violations"] == 0, result


def test_bench_faults_command_small(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "normlab",
            "bench",
            "faults",
            "--json",
            "--form",
            "embedded",
            "--runs",
            "4",
            "--viewers",
            "20",
            "--events",
            "20",
            "--rate",
            "20",
            "--no-lost",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    q, v = report["results"]["queue"], report["results"]["viewers"]
    assert q["completed"] == 4 and q["twice"] == 0 and q["fifo_violations"] == 0
    assert v["clients"] == 20 and v["lost"] == 0 and v["duplicates"] == 0 and v["p95_ms"] > 0
    assert report["targets"]["viewers_p95_ms"] == 1000
