"""The kernels' interpreter tests, run in a child pytest with TRITON_INTERPRET=1 (it must be set before
triton is imported, so not in this process). Two test files each run a share of them
(tests/kernels/test_interpreter_suite*.py), so pytest-xdist can give the shares to two workers."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent / "kernels"
HAS_CUDA = torch.cuda.is_available()
HAS_TRITON = importlib.util.find_spec("triton") is not None
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
SKIP_WHY = "needs triton on a CPU machine, and this process not already interpreted"
CANNOT_RUN = HAS_CUDA or not HAS_TRITON or INTERPRETED
# the two shares: LayerNorm, the GRU cell and CUDA graphs; the LSTM cell and the sequence kernels
SHARES = (
    ("test_layer_norm_interp.py", "test_gru_interp.py", "test_graphs_interp.py"),
    ("test_lstm_interp.py", "test_lstm_seq_interp.py", "test_gru_seq_interp.py"),
)


def run_interpreted(files: tuple[str, ...]) -> None:
    """Run tests/kernels/FILES in a child pytest under the interpreter; fail with its output if any fail
    or none ran."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=5"]
        + [str(HERE / f) for f in files],
        cwd=HERE.parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
    assert " skipped" not in proc.stdout.splitlines()[-1], "interpreter tests skipped in the child"
