"""`python -m benchmarks.engine_cuda [--out DIR] [--json]`: the engine on CUDA with our kernels vs without.

Issue 20's product claim: engine steps/s on CUDA with `kernel_backend=auto` (Triton LayerNorm above its
size line, the fused LN-LSTM / LN-GRU sequences) ≥ with `kernel_backend=torch`, for every task. Each
available task's default model with LayerNorm is trained for warm-up + measured steps with each backend,
round-robin over `--rounds` (fastest round kept, as `normlab bench engine` does), and the ratio printed.
Then the engine's own LN-LSTM layer (`LSTMLayer(norm="layer")`), fwd+bwd at B=32 T=128 H=512, with each
backend (CUDA events, median). This was part of `kernels/bench.py`; kernels/ imports nothing of ours, so
it lives here, beside the engine. Without CUDA it prints why and exits 0 with {"skipped": reason}.
scripts/gpu_check.sh runs it on the GPU machine (engine_cuda.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from normlab.settings import Settings

LSTM_SHAPE = (32, 128, 512)  # B, T, H: the fused LN-LSTM's target shape


def _lstm_layer_ms(backend: str, repeats: int = 20) -> float:
    import kernels
    from workers.engine.options import EngineOptions
    from workers.engine.recurrent import LSTMLayer

    B, T, H = LSTM_SHAPE
    torch.manual_seed(0)
    layer = LSTMLayer(H, H, norm="layer").cuda()
    x = torch.randn(T, B, H, device="cuda")
    layer.engine_options = EngineOptions(kernel_backend=kernels.check_backend(backend))
    for _ in range(3):  # compile, capture the CUDA graphs
        layer(x).sum().backward()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        layer(x).sum().backward()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(tasks: list[str] | None, warmup: int, steps: int, rounds: int, settings: Settings) -> dict:
    from benchmarks.engine import task_rows
    from normlab_client.catalog import TASKS

    names = tasks or [t for t, info in TASKS.items() if "layer" in info.norms]
    by_backend = {}
    for backend in ("auto", "torch"):
        cfg = settings.model_copy(update={"kernel_backend": backend})
        by_backend[backend] = task_rows(names, ["layer"], warmup, steps, cfg, rounds)
    rows = []
    for auto, plain in zip(by_backend["auto"], by_backend["torch"], strict=True):
        a, t = auto.get("steps_per_s"), plain.get("steps_per_s")
        rows.append(
            {
                "task": auto["task"],
                "norm": auto["norm"],
                "model": auto.get("model"),
                "steps_per_s_auto": a,
                "steps_per_s_torch": t,
                "auto_over_torch": round(a / t, 3) if a and t else None,
                "status": auto.get("status"),
                "error": auto.get("error") or plain.get("error"),
            }
        )
    lstm = {backend: round(_lstm_layer_ms(backend), 4) for backend in ("auto", "torch")}
    ratios = [r["auto_over_torch"] for r in rows if r["auto_over_torch"] is not None]
    return {
        "device": torch.cuda.get_device_name(),
        "warmup": warmup,
        "steps": steps,
        "rounds": rounds,
        "tasks": rows,
        "engine_lnlstm_ms": {"shape_BTH": LSTM_SHAPE, **lstm},
        "summary": {
            "min_auto_over_torch (target >= 1)": min(ratios, default=None),
            "engine_lnlstm_auto_over_torch_time": round(lstm["auto"] / lstm["torch"], 3),
        },
    }


def main(argv: list[str] | None, settings: Settings) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.engine_cuda", description=__doc__.splitlines()[0])
    p.add_argument("--tasks", help="comma-separated tasks (default: every task with a LayerNorm model)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, help="write engine_cuda.json into this folder")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if min(args.steps, args.rounds) < 1 or args.warmup < 0:
        p.error("--steps and --rounds must be ≥ 1, --warmup ≥ 0")
    if not torch.cuda.is_available():
        reason = "no CUDA GPU here: this compares the engine's kernel backends on a GPU"
        print(json.dumps({"skipped": reason}) if args.json else f"skipped: {reason}")
        return 0
    tasks = [t.strip() for t in args.tasks.split(",")] if args.tasks else None
    result = measure(tasks, args.warmup, args.steps, args.rounds, settings)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "engine_cuda.json").write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result))
        return 0
    for r in result["tasks"]:
        print(
            f"{r['task']:<12} {r['norm']:<6} auto {r['steps_per_s_auto'] or 0:9.1f} steps/s  torch "
            f"{r['steps_per_s_torch'] or 0:9.1f}  auto/torch {r['auto_over_torch']}"
        )
    print(json.dumps(result["summary"]))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(None, Settings()))  # an edge: the settings are read here
