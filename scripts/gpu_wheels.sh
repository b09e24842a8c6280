#!/usr/bin/env bash
# Wheels for what the GPU machine lacks, so the engine imports there (it has torch, triton, numpy and
# pytest, but not pydantic / pydantic-settings, which normlab_client.spec and normlab.settings need): without
# them the engine's GPU tests and benchmarks/engine_cuda.py skip. Plus liger-kernel (pure Python,
# its deps torch and triton are there), the LayerNorm baseline `kernels.bench` imports only if present. Run here, before the device call;
# the folder travels with the call when `carry` names it, and scripts/gpu_check.sh installs it there:
#   bash scripts/gpu_wheels.sh            # -> .whl/*.whl (ignored by git)
#   run(command="bash scripts/gpu_check.sh $OUT/gpu", carry=[".whl"], timeout_s=420)
# The versions are the ones this checkout's tests run with (.venv-test, which scripts/test installs; else
# the README's .venv), for the GPU machine's Python (GPU_PYTHON, default 3.12) on x86-64 Linux.
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-.whl}"
pyver="${GPU_PYTHON:-3.12}"
py=python3
for venv in .venv-test .venv; do
  if [ -x "$venv/bin/python" ]; then py="$venv/bin/python"; break; fi
done
# dist=fallback version (used when the local Python does not have the distribution)
wanted="pydantic=2.14.4 pydantic-core=2.50.5 pydantic-settings=2.16.3 python-dotenv=1.2.4
annotated-types=0.8.0 typing-inspection=0.4.5 typing-extensions=4.16.0 liger-kernel=0.8.5"
specs=()
for item in $wanted; do
  dist="${item%%=*}"
  version=$("$py" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$dist" 2>/dev/null \
            || echo "${item#*=}")
  specs+=("$dist==$version")
done
rm -rf "$dest" && mkdir -p "$dest"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dest" "${specs[@]}"
ls -1 "$dest"
du -sh "$dest"
