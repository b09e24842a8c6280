"""scripts/gpu_check.sh, dry-run on a machine without CUDA: every step runs (the GPU ones skip), and what
it leaves fits what the device tool brings back (at most 8 files, 16 MiB each, 2 folders down, plain
names), with status.json saying how each step went."""

import base64
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[2]
dry_run = pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is for machines without CUDA")


def _wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel (one module), as scripts/gpu_wheels.sh leaves real ones."""
    files = {
        "nlprobe/__init__.py": b"VALUE = 1\n",
        "nlprobe-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: nlprobe\nVersion: 0.1\n",
        "nlprobe-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = [f"{name},sha256={digest(data)},{len(data)}" for name, data in files.items()]
    record.append("nlprobe-0.1.dist-info/RECORD,,")
    path = folder / "nlprobe-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("nlprobe-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _check(out: Path, wheels: Path, **env) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_WHEELS": str(wheels), **env}
    proc = subprocess.run(
        ["bash", "scripts/gpu_check.sh", str(out / "gpu")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8, files
    for p in files:
        rel = p.relative_to(out)
        assert len(rel.parts) <= 3 and all(re.fullmatch(r"[A-Za-z0-9._-]+", part) for part in rel.parts), rel
        assert p.stat().st_size <= 16 * 2**20, rel
    return proc, json.loads((out / "gpu" / "status.json").read_text())


@dry_run
def test_the_dry_run_reports_every_step_in_at_most_eight_files(tmp_path):
    pytest.importorskip("triton")
    wheels = tmp_path / "whl"
    wheels.mkdir()
    _wheel(wheels)
    # the tests' budget raised: on a loaded CPU machine starting python and collecting took > 110 s
    proc, status = _check(tmp_path / "out", wheels, GPU_CHECK_TESTS_S="300")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert status["wheels"] == "installed" and status["engine_imports"] is True
    assert status["rc"] == {"tests": 0, "bench": 0, "overhead": 0, "engine_cuda": 0}
    assert status["engine_cuda"] == {"source": "none"}  # it said why it skipped (no CUDA), wrote nothing
    # every gpu test, the engine's included, was collected and skipped cleanly
    tests = status["tests"]
    assert tests["tests"] >= 50 and tests["skipped"] == tests["tests"] and tests["failed"] == []
    assert status["bench"]["source"] == "none"  # without CUDA the benchmark only says why it skipped
    out = tmp_path / "out" / "gpu"
    assert "no CUDA GPU" in (out / "bench.log").read_text()
    assert (out / "overhead.txt").read_text().startswith("skipped")
    with tarfile.open(out / "extras.tar.gz") as tar:
        names = set(tar.getnames())
        env = tar.extractfile("env.txt").read().decode()
    assert {"env.txt", "gpu_tests.xml", "wheels.log", "overhead.log", "engine_cuda.log"} <= names
    assert {f"precompile_{i}.log" for i in range(4)} <= names  # the baselines' compilers, beside the tests
    assert "wheels: installed; engine imports: 1" in env


@dry_run
def test_a_step_that_fails_or_is_cut_shows_in_the_status_and_the_exit_code(tmp_path):
    wheels = tmp_path / "whl"
    wheels.mkdir()
    (wheels / "broken-0.1-py3-none-any.whl").write_bytes(b"not a zip")
    proc, status = _check(
        tmp_path / "out",
        wheels,
        GPU_CHECK_TESTS_S="1",
        GPU_CHECK_BENCH_S="0",
        GPU_CHECK_OVERHEAD_S="0",
        GPU_CHECK_ENGINE_S="0",
    )
    assert proc.returncode != 0
    assert status["wheels"] == "failed"
    assert status["rc"] == {"tests": 124, "bench": -1, "overhead": -1, "engine_cuda": -1}  # pytest cut at 1 s
    assert status["bench"] == {"source": "skipped"}


def _status_module():
    spec = importlib.util.spec_from_file_location("gpu_status", ROOT / "scripts" / "gpu_status.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="1" tests="3"><testcase classname="tests.kernels.test_gpu" name="test_a"/><testcase
classname="tests.kernels.test_gpu" name="test_b"><failure message="boom"/></testcase><testcase
classname="tests.kernels.test_gpu" name="test_c"><skipped message="no"/></testcase></testsuite>
</testsuites>"""


def test_status_counts_the_tests_and_summarizes_a_benchmark_cut_short(tmp_path):
    from kernels import bench

    (tmp_path / "env.txt").write_text("NVIDIA H200\nwheels: installed; engine imports: 1\n")
    (tmp_path / "gpu_tests.xml").write_text(JUNIT)
    rows = [
        {
            "M": 4096,
            "N": 8192,
            "dtype": "bf16",
            "mode": "fwd",
            "impl": impl,
            "ms": ms,
            "GBps": 1.0,
            "pct_peak": pct,
            "max_err_y": 0.0,
        }
        for impl, ms, pct in (("triton", 0.10, 90.0), ("torch", 0.08, 95.0))
    ]
    lstm = {"B": 8, "T": 64, "H": 256, "impl": bench.SEQUENCE, "ms": 2.0, "x_cudnn": 1.2}
    with (tmp_path / "kernel_bench.jsonl").open("w") as f:  # the stream of a run cut before its summary
        items = [{"layer_norm": r} for r in rows] + [{"ln_lstm": lstm}]
        f.writelines(json.dumps(item) + "\n" for item in items)
        f.write('{"layer_norm": {"M": 1')
    args = [
        "--tests-rc",
        "1",
        "--bench-rc",
        "124",
        "--overhead-rc",
        "-1",
        "--seconds",
        "300",
        "--engine",
        "1",
        "--wheels",
        "installed",
    ]
    assert _status_module().main([str(tmp_path), *args]) == 0
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["tests"] == {
        "tests": 3,
        "failures": 1,
        "errors": 0,
        "skipped": 1,
        "passed": 1,
        "failed": ["tests.kernels.test_gpu::test_b"],
    }
    assert status["rc"] == {"tests": 1, "bench": 124, "overhead": -1, "engine_cuda": -1}
    assert status["env"][0] == "NVIDIA H200"
    b = status["bench"]
    assert b["source"].startswith("kernel_bench.jsonl")
    assert b["rows"] == {"layer_norm": 2, "ln_lstm": 1, "ln_gru": 0}
    assert b["summary"] == bench.summarize(rows, [lstm])
    assert b["summary"]["triton_slower_than_a_baseline (target: none)"][0]["ratio"] == 1.25
    # a finished benchmark: its own summary, and what it left out
    (tmp_path / "kernel_bench.json").write_text(
        json.dumps(
            {
                "seconds": 12.5,
                "parts": ["lstm"],
                "layer_norm": [],
                "ln_lstm": [lstm],
                "ln_gru": [],
                "not_measured": ["gru B=8 T=64 H=256"],
                "compile_cache": {"fxgraph_cache_hit": 6},
                "summary": {"x": 1},
            }
        )
    )
    assert _status_module().main([str(tmp_path), *args]) == 0
    b = json.loads((tmp_path / "status.json").read_text())["bench"]
    assert b == {
        "source": "kernel_bench.json",
        "seconds": 12.5,
        "parts": ["lstm"],
        "rows": {"layer_norm": 0, "ln_lstm": 1, "ln_gru": 0},
        "not_measured": ["gru B=8 T=64 H=256"],
        "compile_cache": {"fxgraph_cache_hit": 6},
        "summary": {"x": 1},
    }
