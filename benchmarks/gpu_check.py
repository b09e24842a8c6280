"""The GPU check, also `normlab bench kernel`: `python -m benchmarks.gpu_check [OUT] [--only STEPS] [--json]`.

Steps, in the order that spends a short GPU lease on what matters first, each under its own time cap:
  tests   `pytest -m gpu tests/kernels` (correctness before any figure)
  probe   where the forced-Triton backward's excess goes (benchmarks/gpu_probe.py), two shapes
  ln      LayerNorm bf16 at M·N ≥ 32M: ours, eager torch and torch.compile (every row compiled: Dynamo
          reset per shape, never past its recompile limit), forward and backward by events, the kernels
          alone by events and by CUDA-graph replay, as % of the copy ceiling measured in the same run and
          of the GPU's peak; then the dispatch's measured choice per row
  host    host µs per call on a small shape, without grad (forward) and with grad (fwd + backward):
          ours, dispatched, torch
  lstm    the fused LN-LSTM sequence, fwd+bwd at B=32 T=128 H=512, against cuDNN (regression guard)
  engine  engine steps/s with kernel_backend auto vs torch on two tasks (not in the default run: met)
Every step appends its rows to results.jsonl as they are measured and rewrites status.json when it ends,
so a step cut by its cap, or a run cut by the lease, still leaves what it measured. The dispatch's
calibration cache lives in RESULTS/calibration (never the user's cache). Without CUDA each step records
why it was skipped (the CPU dry run the tests make). The default steps' caps sum to CAPS_TOTAL, which
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
from pathlib import Path

from benchmarks.gpu_probe import bench as _bench
from benchmarks.gpu_probe import graph_bench, host_seconds, probe_row

CAPS = {"tests": 95, "probe": 45, "ln": 150, "host": 20, "lstm": 45, "engine": 60}
DEFAULT_STEPS = ("tests", "probe", "ln", "host", "lstm")
CAPS_TOTAL = sum(CAPS[name] for name in DEFAULT_STEPS)
RECOMMENDED_TIMEOUT_S = 420
LN_N = (768, 1000, 2041, 4096, 4099, 5120, 8192, 16384, 32768, 65536)
PEAK_GBS = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0}
PROBE_N = (1000, 4096)


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


def _ln_row(M: int, N: int, compiled, calibrator, step: Step) -> dict:
    """One bf16 (M, N) row: ours, eager and compiled torch, forward and backward (bwd = fwd+bwd − fwd) by
    events; the kernels alone by events and by CUDA-graph replay."""
    import torch
    import torch.nn.functional as F

    import kernels
    from kernels import layer_norm_op

    x = torch.randn(M, N, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    w = torch.randn(N, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    b = torch.randn(N, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    dy = torch.randn_like(x)
    sides = {
        "ours": lambda: kernels.triton_layer_norm(x, w, b),
        "eager": lambda: F.layer_norm(x, (N,), w, b),
        "compile": lambda: compiled(x, (N,), w, b),
    }
    row: dict = {"N": N, "M": M}
    for side, fn in sides.items():
        step.check(8)
        with torch.no_grad():
            t_f = _bench(fn)
        t_b = max(_bench(lambda fn=fn: torch.autograd.grad(fn(), (x, w, b), dy)) - t_f, 1e-9)
        row[side] = {"fwd_us": t_f * 1e6, "bwd_us": t_b * 1e6}
    # the kernels alone, outputs allocated once: what host time the rows above carry on top
    xd, wd, bd = x.detach(), w.detach(), b.detach()
    y, stats, dx = torch.empty_like(x), torch.empty(2, M, device="cuda"), torch.empty_like(x)

    def fwd():
        layer_norm_op.forward_into(xd, wd, bd, 1e-5, y, stats[0], stats[1])

    def bwd():
        layer_norm_op.backward_into(dy, xd, wd, stats[0], stats[1], dx, True, b.dtype)

    fwd()
    row["kernels_only"] = {"fwd_us": _bench(fwd) * 1e6, "bwd_us": _bench(bwd) * 1e6}
    graphed = {d: graph_bench(fn) for d, fn in (("fwd", fwd), ("bwd", bwd))}
    row["kernels_graph"] = {f"{d}_us": None if t is None else t * 1e6 for d, t in graphed.items()}
    best = {d: min(row["eager"][f"{d}_us"], row["compile"][f"{d}_us"]) for d in ("fwd", "bwd")}
    row["ours_vs_best_torch"] = {d: row["ours"][f"{d}_us"] / best[d] for d in ("fwd", "bwd")}
    row["kernels_vs_best_torch"] = {d: row["kernels_only"][f"{d}_us"] / best[d] for d in ("fwd", "bwd")}
    kernels.layer_norm(x, w, b, calibrator=calibrator).backward(dy)  # the engine's path: its choice
    with torch.no_grad():
        kernels.layer_norm(x, w, b, calibrator=calibrator)
    choices = kernels.layer_norm_choices(calibrator).items()
    row["dispatch"] = {k.split(" | ", 1)[1]: v for k, v in choices if f"N={N}," in k}
    return row


def _percentages(row: dict, ceiling_gbs: float, peak_gbs: float | None) -> None:
    """% of the copy ceiling (and of peak) per side and direction: fwd moves 2·M·N·2 bytes, bwd 3·M·N·2."""
    moved = {"fwd": 2 * row["M"] * row["N"] * 2, "bwd": 3 * row["M"] * row["N"] * 2}
    for side in ("ours", "eager", "compile", "kernels_only", "kernels_graph"):
        for d, nbytes in moved.items():
            t = row[side].get(f"{d}_us")
            if not t:
                continue
            gbs = nbytes / (t * 1e-6) / 1e9
            row[side][f"{d}_pct_ceiling"] = 100 * gbs / ceiling_gbs
            if peak_gbs:
                row[side][f"{d}_pct_peak"] = 100 * gbs / peak_gbs


def _calibrator(step: Step):
    import kernels

    return kernels.make_calibrator(step.out / "calibration")  # this run's own, never ~/.cache


def step_ln(step: Step, scale: float) -> None:
    import torch
    import torch.nn.functional as F

    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_GBS.items() if k in name), None)
    elems = int(32 * 2**20 * scale)
    ceiling = _copy_ceiling_gbs(elems)
    step.row(copy_ceiling_gbs=ceiling, peak_gbs=peak, gpu=name)
    compiled = torch.compile(F.layer_norm, dynamic=False)
    calibrator = _calibrator(step)
    for N in LN_N if scale >= 1 else (64, 100):
        step.check(12)
        # ten shapes × dynamic=False pass Dynamo's recompile limit (8): the last rows would silently run
        # eager. A reset per shape (public API) compiles every row afresh instead.
        torch.compiler.reset()
        row = _ln_row(-(-elems // N), N, compiled, calibrator, step)
        _percentages(row, ceiling, peak)
        step.row(**row)
    step.row(calibration_first_use_s={k: v["first_use_s"] for k, v in calibrator.measured.items()})


def step_probe(step: Step, scale: float) -> None:
    elems = int(32 * 2**20 * scale)
    for N in PROBE_N if scale >= 1 else (64,):
        step.check(15)
        step.row(**probe_row(-(-elems // N), N, step.out))


def step_host(step: Step, scale: float) -> None:
    import torch
    import torch.nn.functional as F

    import kernels

    x = torch.randn(32, 512, device="cuda", requires_grad=True)
    w = torch.ones(512, device="cuda", requires_grad=True)
    b = torch.zeros(512, device="cuda", requires_grad=True)
    dy = torch.randn_like(x)
    calibrator = _calibrator(step)
    sides = {
        "ours": lambda: kernels.triton_layer_norm(x, w, b),
        "dispatched": lambda: kernels.layer_norm(x, w, b, calibrator=calibrator),
        "torch": lambda: F.layer_norm(x, (512,), w, b),
    }
    row: dict = {}
    for side, fn in sides.items():
        with torch.no_grad():
            row[f"{side}_fwd_nograd_host_us"] = host_seconds(fn, 2000) * 1e6
        row[f"{side}_fwd_bwd_host_us"] = (
            host_seconds(lambda fn=fn: torch.autograd.grad(fn(), (x, w, b), dy)) * 1e6
        )
    for mode in ("fwd_nograd", "fwd_bwd"):
        row[f"dispatched_minus_torch_{mode}_us"] = (
            row[f"dispatched_{mode}_host_us"] - row[f"torch_{mode}_host_us"]
        )
    step.row(shape=[32, 512], **row, target="dispatched <= torch + 3 us, with and without grad",
             dispatch=kernels.layer_norm_choices(calibrator))  # fmt: skip


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


STEPS = {"tests": step_tests, "probe": step_probe, "ln": step_ln, "host": step_host, "lstm": step_lstm,
         "engine": step_engine}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", default=Path("gpu-check"), help="results folder")
    parser.add_argument("--json", action="store_true", help="print status.json at the end")
    parser.add_argument(
        "--only", default=",".join(DEFAULT_STEPS), help=f"comma-separated steps of {list(STEPS)}"
    )
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
