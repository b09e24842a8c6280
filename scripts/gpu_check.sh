#!/usr/bin/env bash
# The GPU check for one short lease: `bash scripts/gpu_check.sh RESULTS_DIR [--only STEP,...]`.
# Steps, caps and outputs: benchmarks/gpu_check.py. The wheels the GPU machine lacks (pydantic & co., for the
# engine step) travel in .whl/ (scripts/gpu_wheels.sh makes them here) and go into a folder of their own.
#   device tool: run(command="bash scripts/gpu_check.sh $OUT/gpu", carry=[".whl"], timeout_s=420)
set -uo pipefail
out="${1:?usage: scripts/gpu_check.sh RESULTS_DIR [--only STEP,...]}"
shift
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONPATH="$PWD:$PWD/client${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
unset TRITON_INTERPRET
PY="${PYTHON:-python3}"
if compgen -G ".whl/*.whl" >/dev/null; then
  site="$(mktemp -d)"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl >"$out/wheels.log" 2>&1 \
    && export PYTHONPATH="$PYTHONPATH:$site"
fi
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv 2>&1; } >"$out/env.txt"
"$PY" -m benchmarks.gpu_check "$out" "$@" 2>&1 | tee "$out/check.log" | tail -40
