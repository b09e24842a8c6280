"""`normlab bench lstm [--threads 1] [--json]`: the CPU LN-LSTM ÷ `torch.nn.LSTM`, same threads, at small and
training batches, and the engine's loop overhead against a plain loop.

Table: fwd+bwd of one layer (input size H, T steps, `out.sum().backward()`) at B ∈ {1, 8, 32} ×
H ∈ {128, 256}: the engine's LN-LSTM (`LSTMLayer(norm="layer")` with the command's EngineOptions, its
recurrence pinned to the same thread count as torch's), the same layer with the C step off
(`EngineOptions.c_step=False`: torch's ops in the same node, i.e. what the C step buys), and
`torch.nn.LSTM` without normalization; torch set to the same `--threads` for all. The three run
interleaved repeat by repeat; medians of this process's CPU time (one thread: time spent descheduled on a
shared machine does not count) or of wall time (more threads). Guard rails: ≤ 2.5× at B = 1, ≤ 1.5× at
B = 32. Loop overhead: see `benchmarks.engine_loop` (target ≤ 1.10×).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn

from normlab.settings import Settings
from workers.engine import native
from workers.engine.options import DEFAULT, EngineOptions
from workers.engine.recurrent import LSTMLayer

BATCHES, HIDDENS = (1, 8, 32), (128, 256)
TARGETS = {1: 2.5, 32: 1.5}


def _fwd_bwd(module: nn.Module, x: torch.Tensor, clock) -> float:
    module.zero_grad(set_to_none=True)
    start = clock()
    out = module(x)
    (out[0] if isinstance(out, tuple) else out).sum().backward()
    return clock() - start


def measure_ratio_table(
    batches=BATCHES,
    hiddens=HIDDENS,
    seq_len: int = 64,
    repeats: int = 7,
    warmup: int = 2,
    threads: int = 1,
    seed: int = 0,
    options: EngineOptions = DEFAULT,
) -> list[dict]:
    """One row per (B, H): median seconds of the engine, the engine without its C step, nn.LSTM, and the
    ratios."""
    if min(seq_len, repeats, threads) < 1 or warmup < 0:
        raise ValueError("seq_len, repeats and threads must be ≥ 1, warmup ≥ 0")
    clock = time.process_time if threads == 1 else time.perf_counter
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    options = options.replace(recurrence_threads=threads)
    rows = []
    try:
        for H in hiddens:
            for B in batches:
                torch.manual_seed(seed)
                engine, ref = LSTMLayer(H, H, "layer", placement="full"), nn.LSTM(H, H)
                torch_ops = LSTMLayer(H, H, "layer", placement="full")
                torch_ops.load_state_dict(engine.state_dict())
                engine.engine_options = options
                torch_ops.engine_options = options.replace(c_step=False)
                x = torch.randn(seq_len, B, H)
                contenders = {"engine": engine, "engine_torch_ops": torch_ops, "torch_lstm": ref}
                times: dict[str, list[float]] = {k: [] for k in contenders}
                for r in range(warmup + repeats):
                    for name, module in contenders.items():
                        t = _fwd_bwd(module, x, clock)
                        if r >= warmup:
                            times[name].append(t)
                med = {k: statistics.median(v) for k, v in times.items()}
                ratio = med["engine"] / med["torch_lstm"]
                rows.append(
                    {
                        "B": B,
                        "H": H,
                        "T": seq_len,
                        "threads": threads,
                        "c_step": native.library(options) is not None,
                        **{f"{k}_ms": round(1e3 * v, 3) for k, v in med.items()},
                        "ratio": round(ratio, 3),
                        "ratio_torch_ops": round(med["engine_torch_ops"] / med["torch_lstm"], 3),
                        "target": TARGETS.get(B),
                        "meets_target": ratio <= TARGETS.get(B, float("inf")),
                    }
                )
    finally:
        torch.set_num_threads(saved)
    return rows


def tables(result: dict) -> list[dict]:
    """BENCHMARKS.md's tables of one `--json` result (`normlab bench lstm --save`)."""
    rows = []
    for r in result["lnlstm_vs_torch_lstm"]:
        rail = "" if r["target"] is None else f"≤ {r['target']:g}×"
        rows.append(
            [
                r["B"],
                r["H"],
                f"{r['engine_ms']:.2f}",
                f"{r['torch_lstm_ms']:.2f}",
                f"**{r['ratio']:.2f}×**",
                rail,
                f"{r['ratio_torch_ops']:.2f}×",
            ]
        )
    first = result["lnlstm_vs_torch_lstm"][0] if result["lnlstm_vs_torch_lstm"] else {}
    out = [
        {
            "caption": f"T = {first.get('T')}, {first.get('threads')} thread(s) on every side, C step "
            f"{'on' if first.get('c_step') else 'off'}; milliseconds per fwd+bwd:",
            "columns": [
                "B",
                "H",
                "engine ms",
                "nn.LSTM ms",
                "engine ÷ nn.LSTM",
                "rail",
                "C step off ÷ nn.LSTM",
            ],
            "rows": rows,
        }
    ]
    loop = result.get("loop_overhead")
    if loop:
        out.append(
            {
                "caption": f"Loop overhead ({loop['task']} {loop['norm']} MLP {loop['model']}, batch "
                f"{loop['batch_size']}, median of {loop['repeats']} runs × {loop['steps']} alternating "
                "steps):",
                "columns": ["engine ms", "plain ms", "engine ÷ plain", "target"],
                "rows": [
                    [
                        f"{loop['engine_ms']:.3f}",
                        f"{loop['plain_ms']:.3f}",
                        f"{loop['ratio']:.3f}×",
                        f"≤ {loop['target_ratio']}×",
                    ]
                ],
            }
        )
    return out


def main(argv: list[str] | None, settings: Settings) -> int:
    p = argparse.ArgumentParser(prog="normlab bench lstm", description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1, help="torch and recurrence threads, both sides")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--loop-repeats", type=int, default=5, help="runs of the loop-overhead measurement")
    p.add_argument("--no-loop", action="store_true", help="skip the loop-overhead measurement")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if min(args.threads, args.seq_len, args.repeats, args.loop_repeats) < 1:
        p.error("--threads, --seq-len, --repeats and --loop-repeats must be ≥ 1")
    options = EngineOptions.from_settings(settings)  # the table runs the engine's layer, not train()
    table = measure_ratio_table(
        seq_len=args.seq_len, repeats=args.repeats, threads=args.threads, options=options
    )
    loop = None
    if not args.no_loop:
        from benchmarks.engine_loop import measure_loop_overhead

        loop = measure_loop_overhead(settings, repeats=args.loop_repeats, threads=args.threads)
    out = {"lnlstm_vs_torch_lstm": table, "loop_overhead": loop, "engine": options.record()}
    if args.json:
        print(json.dumps(out))
        return 0
    clock = "CPU" if args.threads == 1 else "wall"
    print(
        f"LN-LSTM ÷ torch.nn.LSTM, fwd+bwd, T={args.seq_len}, {args.threads} thread(s) both sides, median "
        f"{clock} time of {args.repeats} interleaved repeats; C step: {native.status(options)}; "
        "'torch ops': the same layer with the C step off:"
    )
    print(f"  {'B':>3} {'H':>4} {'engine':>9} {'nn.LSTM':>9} {'ratio':>7} {'target':>7} {'torch ops':>9}")
    for r in table:
        target = "" if r["target"] is None else "≤" + format(r["target"], "g") + "x"
        print(
            f"  {r['B']:>3} {r['H']:>4} {r['engine_ms']:>6.2f} ms {r['torch_lstm_ms']:>6.2f} ms "
            f"{r['ratio']:>6.2f}x {target:>7} {r['ratio_torch_ops']:>8.2f}x"
        )
    if loop:
        print(
            f"Engine loop ÷ plain loop ({loop['task']} {loop['norm']} MLP {loop['model']}, batch "
            f"{loop['batch_size']}, median of {loop['repeats']} runs × {loop['steps']} alternating steps): "
            f"{loop['engine_ms']:.3f} vs {loop['plain_ms']:.3f} ms, {loop['ratio']:.3f}x (target ≤ "
            f"{loop['target_ratio']}x)"
        )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(None, Settings()))  # an edge: the settings are read here
