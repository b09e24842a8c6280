#!/usr/bin/env bash
# One prepared GPU check (issue 20): the `gpu` tests first (the kernels, and the engine training on CUDA),
# then `normlab bench kernel` (copy ceiling, LayerNorm rows timed with and without host time, Liger when its
# wheel travelled, backward profile, LN-LSTM/GRU vs cuDNN at fp32 and TF32), then the engine's steps/s with
# kernel_backend=auto vs torch (workers/engine/bench_cuda.py), then scripts/gpu_overhead.py, with JSON and
# logs written into the results folder given as $1. Installs nothing from a network (the GPU machine has none): it runs on whatever python3
# has torch + triton + pytest there, plus the wheels in .whl/ when they travelled with the call
# (scripts/gpu_wheels.sh makes them: pydantic & co., without which the engine does not import there).
#
#   usage: scripts/gpu_check.sh RESULTS_DIR [bench options, e.g. --parts ln:fp32,ln:fp16 | --quick]
#   device tool: bash scripts/gpu_wheels.sh   (here, first)
#                run(command="bash scripts/gpu_check.sh $OUT/gpu", carry=[".whl"], timeout_s=420)
#
# What round 2 of issue 20 changed is measured by the bf16 part and the LSTM part, which run first after the
# copy ceiling; status.json's summary gives each target on its own line: odd-N forward % of peak (N = 1000,
# 2041, 4099, 5120: the unpadded shifted forward), backward % of peak for N ≤ 8192 and for N > 8192 (16384,
# 32768, 65536: the split-row backward), and the LN-LSTM sequence (input side hoisted) ÷ cuDNN at fp32 with
# TF32 off and with TF32 both sides.
#
# Sized for a lease of 15 minutes of device time that must leave room for a second call: at most
# GPU_CHECK_TESTS_S (150; the benchmark's torch.compile baselines are compiled meanwhile) +
# GPU_CHECK_BENCH_S (170; no new benchmark case after 40 s less) + GPU_CHECK_OVERHEAD_S (40) seconds,
# each 0 to skip that step. A second call can measure what the first one's budget left out, e.g.
#   GPU_CHECK_TESTS_S=0 GPU_CHECK_OVERHEAD_S=0 GPU_CHECK_BENCH_S=300 bash scripts/gpu_check.sh $OUT/gpu \
#     --parts ln:bf16+fp32w,ln:fp32,ln:fp16,gru
# What comes back is at most 8 files (the device tool's limit): status.json (how each step went, test
# counts, the benchmark's target summary), gpu_tests.log, bench.log, kernel_bench.json (when the
# benchmark finished), kernel_bench.jsonl (its rows, streamed), overhead.txt and extras.tar.gz (env.txt,
# the junit report, the logs of the wheels' install, the precompiling processes and the overhead script).
set -uo pipefail
out="${1:?usage: scripts/gpu_check.sh RESULTS_DIR [bench options]}"
shift
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
unset TRITON_INTERPRET  # compiled kernels only
PY="${PYTHON:-python3}"
tests_s="${GPU_CHECK_TESTS_S:-110}"
bench_s="${GPU_CHECK_BENCH_S:-250}"
engine_s="${GPU_CHECK_ENGINE_S:-50}"
overhead_s="${GPU_CHECK_OVERHEAD_S:-30}"
wheel_dir="${GPU_CHECK_WHEELS:-.whl}"
t0=$(date +%s)

{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
  "$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__,
            torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).multi_processor_count, "SMs")'
} >"$out/env.txt" 2>&1

# The wheels that travelled with the call, into a folder of their own ahead of the machine's packages.
wheels=none
if compgen -G "$wheel_dir/*.whl" >/dev/null; then
  site="$(mktemp -d)"
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
       "$wheel_dir"/*.whl >"$out/wheels.log" 2>&1; then
    wheels=installed
    export PYTHONPATH="$site:$PYTHONPATH"
  else
    wheels=failed
  fi
fi
if "$PY" -c "import workers.engine.recurrent" >>"$out/env.txt" 2>&1; then
  engine=1
  targets=(tests/kernels tests/workers/engine/test_train_gpu.py)
  confcut=tests  # tests/conftest.py and the engine's conftest import normlab.settings (pydantic)
else
  engine=0  # the engine's GPU tests and the benchmark's engine rows are left out (env.txt says why)
  targets=(tests/kernels)
  confcut=tests/kernels  # only our own conftest (the others import packages the GPU box lacks)
fi
echo "wheels: $wheels; engine imports: $engine" >>"$out/env.txt"

# While the tests run, GPU_CHECK_PRECOMPILE (4) processes compile the benchmark's torch.compile baselines
# into inductor's on-disk caches (`kernels.bench --precompile`), so the benchmark loads them instead of
# compiling each (dtype, N) itself (status.json: bench.compile_cache counts its hits and misses).
pre_pids=()
pre_k="${GPU_CHECK_PRECOMPILE:-4}"
if [ "$bench_s" -gt 0 ] && [ "$pre_k" -gt 0 ]; then
  pre_s=$((tests_s > 0 ? tests_s : 90))
  for ((i = 0; i < pre_k; i++)); do
    # one compile thread each (no worker pool to start; the processes are the parallelism; the cache keys
    # do not depend on it), below the tests' priority
    TORCHINDUCTOR_COMPILE_THREADS=1 timeout "$pre_s" nice -n 10 "$PY" -m kernels.bench --precompile \
      --shard "$i/$pre_k" "$@" >"$out/precompile_$i.log" 2>&1 &
    pre_pids+=("$!")
  done
fi

tests_rc=-1
if [ "$tests_s" -gt 0 ]; then
  # -v: each test's outcome is in the log as it happens, so a run cut by the limit still says how far it
  # got (the junit report is written only at the end); --durations: what to trim if it does not fit
  timeout "$tests_s" "$PY" -m pytest -m gpu "${targets[@]}" -v --durations=15 -p no:cacheprovider \
    --confcutdir="$confcut" --junitxml="$out/gpu_tests.xml" >"$out/gpu_tests.log" 2>&1
  tests_rc=$?
  tail -5 "$out/gpu_tests.log"
fi

[ "${#pre_pids[@]}" -eq 0 ] || wait "${pre_pids[@]}"  # each has its own limit

# --budget-s: no new case after (limit - 40) s, so the summary is written inside the limit; if the limit
# cuts it anyway, status.json checks the targets on the streamed rows.
bench_rc=-1
if [ "$bench_s" -gt 0 ]; then
  budget=$((bench_s > 50 ? bench_s - 40 : 10))
  timeout "$bench_s" "$PY" -m kernels.bench --out "$out" --budget-s "$budget" "$@" >"$out/bench.log" 2>&1
  bench_rc=$?
  tail -25 "$out/bench.log"
fi

# The product claim: engine steps/s on CUDA with our kernels (kernel_backend=auto) vs torch's, every task.
engine_rc=-1
if [ "$engine_s" -gt 0 ] && [ "$engine" -eq 1 ]; then
  timeout "$engine_s" "$PY" -m workers.engine.bench_cuda --out "$out" >"$out/engine_cuda.log" 2>&1
  engine_rc=$?
  tail -3 "$out/engine_cuda.log"
fi

# Where host and GPU time go (host µs per call, profiles); its figures are diagnostics, not targets.
overhead_rc=-1
if [ "$overhead_s" -gt 0 ]; then
  timeout "$overhead_s" "$PY" scripts/gpu_overhead.py "$out" >"$out/overhead.log" 2>&1
  overhead_rc=$?
  tail -12 "$out/overhead.txt" 2>/dev/null
fi

"$PY" scripts/gpu_status.py "$out" --tests-rc "$tests_rc" --bench-rc "$bench_rc" --overhead-rc "$overhead_rc" \
  --engine-cuda-rc "$engine_rc" \
  --seconds "$(($(date +%s) - t0))" --engine "$engine" --wheels "$wheels" --bench-args "$*" \
  >"$out/status.log" 2>&1 || cp "$out/status.log" "$out/status.json"
# At most 8 files come back: the rest travel in one archive.
(cd "$out" && extras=$(ls -A | grep -vxE 'status\.json|gpu_tests\.log|bench\.log|kernel_bench\.jsonl?|engine_cuda\.json|overhead\.txt')
 [ -z "$extras" ] || { tar -czf extras.tar.gz $extras && rm -rf $extras; })
cat "$out/status.json"
[ "$tests_rc" -le 0 ] && [ "$bench_rc" -le 0 ] && [ "$engine_rc" -le 0 ] && [ "$overhead_rc" -le 0 ]
