#!/usr/bin/env bash
# One prepared GPU check for the kernels: the `gpu` tests, then `normlab bench kernel`, with JSON and
# logs written into the results folder given as $1. Installs nothing (the GPU machine has no network):
# it runs on whatever python3 has torch + triton + pytest there. Fits one 10-minute call:
# tests ≤ 180 s, benchmark ≤ 330 s (no new case after 290 s; results stream to kernel_bench.jsonl, so a cut
# leaves figures, and their summary goes to summary_from_stream.json),
# then scripts/gpu_overhead.py ≤ 60 s (overhead.txt).
#   usage: scripts/gpu_check.sh RESULTS_DIR [bench options, default: none = full matrix; e.g. --quick]
set -uo pipefail
out="${1:?usage: scripts/gpu_check.sh RESULTS_DIR [bench options]}"
shift
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
unset TRITON_INTERPRET  # compiled kernels only
PY="${PYTHON:-python3}"
t0=$(date +%s)

{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
  "$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__,
            torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).multi_processor_count, "SMs")'
} >"$out/env.txt" 2>&1

# --confcutdir: only our own conftest (other areas' conftests may import packages the GPU box lacks).
timeout 180 "$PY" -m pytest -m gpu tests/kernels -q -p no:cacheprovider --confcutdir=tests/kernels \
  --junitxml="$out/gpu_tests.xml" >"$out/gpu_tests.log" 2>&1
tests_rc=$?
tail -5 "$out/gpu_tests.log"

# --budget-s: no new case after 290 s, so the summary is written inside the 330 s limit; if the limit
# cuts it anyway, the targets are checked on the streamed rows.
timeout 330 "$PY" -m kernels.bench --out "$out" --budget-s 290 "$@" >"$out/bench.log" 2>&1
bench_rc=$?
if [ ! -s "$out/kernel_bench.json" ] && [ -s "$out/kernel_bench.jsonl" ]; then
  "$PY" -m kernels.bench --summarize "$out/kernel_bench.jsonl" >"$out/summary_from_stream.json" 2>&1
  cat "$out/summary_from_stream.json"
fi
tail -25 "$out/bench.log"

# Where host and GPU time go (host µs per call, profiles); its figures are diagnostics, not targets.
timeout 60 "$PY" scripts/gpu_overhead.py "$out" >"$out/overhead.log" 2>&1
tail -12 "$out/overhead.txt" 2>/dev/null

printf '{"tests_rc": %d, "bench_rc": %d, "seconds": %d, "bench_args": "%s"}\n' \
  "$tests_rc" "$bench_rc" "$(($(date +%s) - t0))" "$*" >"$out/status.json"
cat "$out/status.json"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
