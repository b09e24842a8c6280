"""status.json for scripts/gpu_check.sh: one file that says how the GPU check went.

    python scripts/gpu_status.py RESULTS_DIR --tests-rc N --bench-rc N --overhead-rc N --seconds S
                                 --engine 0|1 --wheels none|installed|failed [--bench-args "..."]
                                 [--engine-cuda-rc N]

Reads what the check left in RESULTS_DIR: env.txt, gpu_tests.xml (pytest's junit report: counts and the
failing tests' names), kernel_bench.json (the benchmark's summary; when a time limit cut the run, the
targets are checked on the rows streamed to kernel_bench.jsonl instead), engine_cuda.json (auto vs torch
steps/s of the engine). An rc of -1 means the step was
skipped. Prints the status as JSON and writes it to RESULTS_DIR/status.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def _tests(report: Path) -> dict:
    """Counts of pytest's junit report, and the ids of the tests that failed or errored."""
    if not report.is_file():
        return {"report": "missing"}
    try:
        root = ET.parse(report).getroot()
    except ET.ParseError as exc:
        return {"report": f"unreadable: {exc}"}
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed = []
    for suite in root.iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname')}::{case.get('name')}")
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "failed": failed}


def _bench(out: Path) -> dict:
    """The benchmark's summary: from kernel_bench.json when it finished, else from the streamed rows."""
    whole = out / "kernel_bench.json"
    if whole.is_file():
        result = json.loads(whole.read_text())
        return {
            "source": "kernel_bench.json",
            "seconds": result.get("seconds"),
            "parts": result.get("parts"),
            "rows": {k: len(result.get(k, [])) for k in ("layer_norm", "ln_lstm", "ln_gru")},
            "not_measured": result.get("not_measured", []),
            "compile_cache": result.get("compile_cache"),
            "summary": result.get("summary"),
        }
    stream = out / "kernel_bench.jsonl"
    if stream.is_file() and stream.stat().st_size:
        from kernels.bench import read_stream, summarize  # torch: only when there are rows to summarize

        ln_rows, lstm_rows, gru_rows = read_stream(stream)
        return {
            "source": "kernel_bench.jsonl (the run was cut before its summary)",
            "rows": {"layer_norm": len(ln_rows), "ln_lstm": len(lstm_rows), "ln_gru": len(gru_rows)},
            "summary": summarize(ln_rows, lstm_rows, gru_rows),
        }
    return {"source": "none"}


def _engine_cuda(out: Path) -> dict:
    """The engine benchmark's summary (auto vs torch steps/s), or why there is none."""
    path = out / "engine_cuda.json"
    if not path.is_file():
        return {"source": "none"}
    return {"source": "engine_cuda.json", "summary": json.loads(path.read_text()).get("summary")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    for step in ("tests", "bench", "overhead"):
        p.add_argument(f"--{step}-rc", type=int, required=True)
    p.add_argument("--engine-cuda-rc", type=int, default=-1)
    p.add_argument("--seconds", type=int, required=True)
    p.add_argument("--engine", type=int, choices=(0, 1), required=True)
    p.add_argument("--wheels", choices=("none", "installed", "failed"), required=True)
    p.add_argument("--bench-args", default="")
    a = p.parse_args(argv)
    env = a.out / "env.txt"
    status = {
        "seconds": a.seconds,
        "rc": {
            "tests": a.tests_rc,
            "bench": a.bench_rc,
            "overhead": a.overhead_rc,
            "engine_cuda": a.engine_cuda_rc,
        },
        "engine_imports": bool(a.engine),
        "wheels": a.wheels,
        "env": env.read_text().strip().splitlines() if env.is_file() else [],
        "tests": _tests(a.out / "gpu_tests.xml") if a.tests_rc != -1 else {"report": "skipped"},
        "bench": _bench(a.out) if a.bench_rc != -1 else {"source": "skipped"},
        "bench_args": a.bench_args,
        "engine_cuda": _engine_cuda(a.out) if a.engine_cuda_rc != -1 else {"source": "skipped"},
    }
    text = json.dumps(status, indent=1)
    (a.out / "status.json").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
