"""The GPU check, also `normlab bench kernel`: `python -m benchmarks.gpu_check [OUT] [--only STEPS] [--json]`.

Steps, in the order that spends a short GPU lease on what matters first, each under its own time cap:
  tests   `pytest -m gpu tests/kernels` (correctness before any figure)
  lstm    the fused LN-LSTM sequence, fwd+bwd at B=32 T=128 H=512, against cuDNN's nn.LSTM (fp32, TF32)
  ln      LayerNorm bf16 at M·N ≥ 32M: ours, eager torch and torch.compile, forward and backward, as % of
          the copy ceiling and of the GPU's peak bandwidth; then the dispatch's measured choice per row
  host    host µs per call on a small shape (back-to-back calls, no flush): ours, dispatched, torch
  engine  engine steps/s with kernel_backend auto vs torch on two tasks
Every step appends its rows to results.jsonl as they are measured and rewrites status.json when it ends,
so a step cut by its cap, or a run cut by the lease, still leaves what it measured. Without CUDA each
step records why it was skipped (the CPU dry run the tests make). Caps (seconds) sum to CAPS_TOTAL, which
leaves 45 s of a 420 s lease for start-up and the copy back.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

CAPS = {"tests": 95, "lstm": 45, "ln": 150, "host": 20, "engine": 60}
CAPS_TOTAL = sum(CAPS.values())
RECOMMENDED_TIMEOUT_S = 420
LN_N = (768, 1000, 2041, 4096, 4099, 5120, 8192, 16384, 32768, 65536)
PEAK_GBS = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0}


class Cut(Exception):
    """A step ran past its cap."""


class Step:
    """One step's budget: `check()` raises Cut once the cap is spent; rows stream to results.jsonl."""

    def __init__(self, name: str, cap: float, out: Path) -> None:
        self.name, self.cap, self.out, self.t0 = name, cap, out, time.monotonic()

    def left(self) -> float:
        return self.cap - (time.monotonic() - self.t0)

    def check(self, need: float = 0.0) -> None:
        if self.left() < need:
            raise Cut(f"{self.name}: cap of {self.cap} s reached")

    def row(self, **row: object) -> None:
        with open(self.out / "results.jsonl", "a") as f:
            f.write(json.dumps({"step": self.name, **row}) + "\n")
        print(self.name, json.dumps(row), flush=True)


def _bench(fn: Callable[[], object], reps: int = 10) -> float:
    """Median-of-3 GPU seconds per call, `reps` calls back to back between two events (no flush)."""
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / reps)
    return sorted(times)[1]


def step_tests(step: Step, scale: float) -> None:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/kernels", "-q", "-p", "no:cacheprovider",
           "--confcutdir=tests/kernels"]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(5, step.left() - 2))
        tail = proc.stdout.strip().splitlines()[-1:] or [proc.stderr.strip()[-300:]]
        (step.out / "gpu_tests.log").write_text(proc.stdout[-60000:] + proc.stderr[-20000:])
        step.row(rc=proc.returncode, summary=tail[0])
    except subprocess.TimeoutExpired as e:
        (step.out / "gpu_tests.log").write_text(str(e.stdout or "")[-60000:])
        raise Cut("tests: cap reached") from e


def step_lstm(step: Step, scale: float) -> None:
    import torch

    import kernels

    B, T, H = (32, 128, 512) if scale >= 1 else (4, 8, 32)
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(T, B, H, device=dev, generator=g)
    w_x = (torch.randn(4 * H, H, device=dev, generator=g) / H**0.5).requires_grad_()
    w_h = (torch.randn(4 * H, H, device=dev, generator=g) / H**0.5).requires_grad_()
    params = [torch.ones(4 * H, device=dev), torch.zeros(4 * H, device=dev), torch.ones(4 * H, device=dev),
              torch.zeros(4 * H, device=dev), torch.zeros(4 * H, device=dev), torch.ones(H, device=dev),
              torch.zeros(H, device=dev)]  # fmt: skip
    params = [p.requires_grad_() for p in params]
    h0 = c0 = torch.zeros(B, H, device=dev)
    cudnn = torch.nn.LSTM(H, H).to(dev)

    def ours():
        ax = x @ w_x.t()  # the input projection, as cuDNN's time includes it
        kernels.triton_ln_lstm_sequence(ax, w_h, *params, h0, c0).sum().backward()

    def theirs():
        cudnn(x)[0].sum().backward()

    for tf32 in (False, True):
        step.check(5)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        t_ours, t_cudnn = _bench(ours, 5), _bench(theirs, 5)
        step.row(shape=[B, T, H], precision="tf32" if tf32 else "fp32", ours_ms=t_ours * 1e3,
                 cudnn_ms=t_cudnn * 1e3, ratio=t_ours / t_cudnn, target="<= 1.3")  # fmt: skip
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False


def _copy_ceiling_gbs(elems: int) -> float:
    import torch

    src = torch.empty(elems, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    return 2 * elems * 2 / _bench(lambda: dst.copy_(src)) / 1e9


def _ln_row(M: int, N: int, compiled, step: Step) -> dict:
    """One bf16 (M, N) row: ours, eager and compiled torch, forward and backward (bwd = fwd+bwd − fwd)."""
    import torch
    import torch.nn.functional as F

    import kernels
    from kernels import layer_norm_op

    x = torch.randn(M, N, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    w = torch.randn(N, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    b = torch.randn(N, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    dy = torch.randn_like(x)
    sides = {
        "ours": lambda: layer_norm_op.triton_layer_norm(x, w, b),
        "eager": lambda: F.layer_norm(x, (N,), w, b),
        "compile": lambda: compiled(x, (N,), w, b),
    }
    row: dict = {"N": N, "M": M}
    for side, fn in sides.items():
        step.check(8)
        with torch.no_grad():
            t_f = _bench(fn)
        t_b = max(_bench(lambda fn=fn: torch.autograd.grad(fn(), (x, w, b), dy)) - t_f, 1e-9)
        row[side] = {"fwd_us": t_f * 1e6, "bwd_us": t_b * 1e6,
                     "fwd_gbs": 2 * M * N * 2 / t_f / 1e9, "bwd_gbs": 3 * M * N * 2 / t_b / 1e9}  # fmt: skip
    # the kernels alone, outputs allocated once: what host time the rows above carry on top
    y, mean, rstd = (torch.empty_like(x), *torch.empty(2, M, device="cuda"))
    dx = torch.empty_like(x)
    with torch.no_grad():
        layer_norm_op.forward_into(x, w, b, 1e-5, y, mean, rstd)
        t_f = _bench(lambda: layer_norm_op.forward_into(x, w, b, 1e-5, y, mean, rstd))
        t_b = _bench(lambda: layer_norm_op.backward_into(dy, x, w, mean, rstd, dx, True, b.dtype))
    row["kernels_only"] = {"fwd_us": t_f * 1e6, "bwd_us": t_b * 1e6}
    best = {d: min(row["eager"][f"{d}_us"], row["compile"][f"{d}_us"]) for d in ("fwd", "bwd")}
    row["ours_vs_best_torch"] = {d: row["ours"][f"{d}_us"] / best[d] for d in ("fwd", "bwd")}
    row["kernels_vs_best_torch"] = {d: row["kernels_only"][f"{d}_us"] / best[d] for d in ("fwd", "bwd")}
    kernels.layer_norm(x, w, b).backward(dy)  # the engine's path: its measured choice for this class
    choices = kernels.layer_norm_choices().items()
    row["dispatch"] = {k.split(" | ", 1)[1]: v for k, v in choices if f"N={N}," in k}
    return row


def step_ln(step: Step, scale: float) -> None:
    import torch
    import torch.nn.functional as F

    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_GBS.items() if k in name), None)
    elems = int(32 * 2**20 * scale)
    step.row(copy_ceiling_gbs=_copy_ceiling_gbs(elems), peak_gbs=peak, gpu=name)
    compiled = torch.compile(F.layer_norm, dynamic=False)
    for N in LN_N if scale >= 1 else (64, 100):
        step.check(12)
        row = _ln_row(-(-elems // N), N, compiled, step)
        if peak:
            ko = row["kernels_only"]
            moved = {"fwd": 2 * row["M"] * N * 2, "bwd": 3 * row["M"] * N * 2}
            row["kernels_pct_peak"] = {d: 100 * moved[d] / (ko[f"{d}_us"] * 1e-6) / 1e9 / peak for d in moved}
        step.row(**row)


def step_host(step: Step, scale: float) -> None:
    import torch
    import torch.nn.functional as F

    import kernels
    from kernels import layer_norm_op

    x = torch.randn(32, 512, device="cuda")
    w, b = torch.ones(512, device="cuda"), torch.zeros(512, device="cuda")
    sides = {
        "ours": lambda: layer_norm_op.triton_layer_norm(x, w, b),
        "dispatched": lambda: kernels.layer_norm(x, w, b),
        "torch": lambda: F.layer_norm(x, (512,), w, b),
    }
    row = {}
    for side, fn in sides.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(2000):
            fn()
        host = (time.perf_counter() - t0) / 2000
        torch.cuda.synchronize()
        row[f"{side}_host_us"] = host * 1e6
    step.row(shape=[32, 512], **row, target_ours_host_us="<= 10")


def step_engine(step: Step, scale: float) -> None:
    from benchmarks import engine_cuda as bench_cuda
    from normlab.settings import Settings

    tasks = ["copy", "seq-digits"]
    steps = 60 if scale >= 1 else 3
    result = bench_cuda.measure(tasks, 10 if scale >= 1 else 1, steps, 1, Settings())
    step.row(tasks=tasks, steps=steps, result=result)


def run_steps(names: list[str], out: Path, scale: float, cuda: bool, status: dict) -> None:
    """Runs each step under its cap; status.json is rewritten after every step, whatever it did."""
    for name in names:
        step = Step(name, CAPS[name], out)
        if not cuda:
            status["steps"][name] = {"state": "skipped", "why": "no CUDA device"}
        else:
            try:
                STEPS[name](step, scale)
                status["steps"][name] = {"state": "done"}
            except Cut as e:
                status["steps"][name] = {"state": "cut", "why": str(e)}
            except Exception as e:  # a failing step must not cost the steps after it
                status["steps"][name] = {"state": "failed", "why": f"{type(e).__name__}: {e}"}
                with open(out / "errors.log", "a") as f:
                    f.write(f"--- {name}\n{traceback.format_exc()}\n")
        status["steps"][name]["seconds"] = round(time.monotonic() - step.t0, 1)
        (out / "status.json").write_text(json.dumps(status, indent=1))


STEPS = {"tests": step_tests, "lstm": step_lstm, "ln": step_ln, "host": step_host, "engine": step_engine}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", default=Path("gpu-check"), help="results folder")
    parser.add_argument("--json", action="store_true", help="print status.json at the end")
    parser.add_argument("--only", default=",".join(STEPS), help="comma-separated steps, in this order")
    parser.add_argument("--scale", type=float, default=1.0, help="< 1: tiny shapes (a dry run)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.pop("TRITON_INTERPRET", None)
    status: dict = {"caps_s": CAPS, "recommended_timeout_s": RECOMMENDED_TIMEOUT_S, "steps": {}}
    try:
        import torch

        cuda = torch.cuda.is_available()
        gpu = torch.cuda.get_device_name() if cuda else None
        status["env"] = {"torch": torch.__version__, "cuda": cuda, "gpu": gpu}
        import triton

        status["env"]["triton"] = triton.__version__
    except ImportError as e:
        status["env"] = {"error": str(e)}
    run_steps(args.only.split(","), args.out, args.scale, bool(status["env"].get("cuda")), status)
    print(json.dumps(status if args.json else status["steps"]))
    return 0 if all(s["state"] in ("done", "skipped") for s in status["steps"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
