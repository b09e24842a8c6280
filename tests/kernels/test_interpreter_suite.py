"""Runs the interpreter tests in a child pytest with TRITON_INTERPRET=1 (set before triton is imported)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

INTERP_FILES = (
    "test_layer_norm_interp.py",
    "test_lstm_interp.py",
    "test_lstm_seq_interp.py",
    "test_gru_interp.py",
    "test_gru_seq_interp.py",
    "test_graphs_interp.py",
)
HAS_CUDA = torch.cuda.is_available()
HAS_TRITON = importlib.util.find_spec("triton") is not None
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@pytest.mark.skipif(
    HAS_CUDA or not HAS_TRITON or INTERPRETED,
    reason="needs triton on a CPU machine, and this process not already interpreted",
)
def test_interpreter_tests_pass_in_a_child_process():
    here = Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--durations=5",
            *[str(here / f) for f in INTERP_FILES],
        ],
        cwd=here.parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
    assert " skipped" not in proc.stdout.splitlines()[-1], "interpreter tests skipped in the child"
