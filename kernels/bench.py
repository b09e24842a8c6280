"""`normlab bench kernel [--json] [--out DIR] [--quick]`: Triton LayerNorm / LN-LSTM vs torch on one GPU.

Side by side in one process: a copy-ceiling row (1 GiB bf16 device copy); the Triton LayerNorm (forced:
`triton`; and `normlab`, i.e. `kernels.layer_norm` with its size-aware dispatch to `F.layer_norm`),
`F.layer_norm` eager and `torch.compile`d, and Liger-Kernel's LayerNorm when installed, over the matrix of
the kernel notes (M × N × dtype × forward / backward / forward+backward) plus host-bound small shapes.
Each row is timed two ways: `do_bench` (`ms`: what a caller sees, host time included) and
`do_bench_cudagraph` (`ms_graph`: GPU time alone); `host_us` is the gap. GB/s on model bytes (forward
2·M·N·s, backward 3·M·N·s, both 5·M·N·s) and % of the H200's 4.8 TB/s come from the GPU time, with the
max error against a float64 reference. Then a profiler breakdown of three backward shapes, the
recurrent part (`kernels/bench_rnn.py`: the fused LN-LSTM / LN-GRU against cuDNN, fp32 with TF32 off and
both with TF32, cuDNN fp16 as a reference) and the summary of issue 20's targets, with the measured
dispatch boundary beside `kernels.LN_TRITON_MIN_ELEMS`. Without CUDA it prints why and exits 0 with
{"skipped": reason}.
Results stream to DIR/kernel_bench.jsonl as they come, so a run cut short still leaves its figures
(`--summarize DIR/kernel_bench.jsonl` checks the targets on them); `--budget-s` ends a run in time to
write its summary, listing the cases it did not reach.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from kernels import bench_ln, bench_probe, bench_rnn, graphs
from kernels.bench_ln import (  # noqa: F401
    DTYPES,
    FULL,
    HOST_BOUND,
    MAX_ELEMS,
    MODES,
    PEAK_TBS,
    QUICK,
    SMOKE,
    _case_inputs,
    _compiled_impl,
    _leaves,
    _ln_impls,
    _ms,
    _ms_graph,
    compile_cache,
)
from kernels.bench_rnn import GRU_SEQUENCE, GRU_SEQUENCE_EAGER, SEQUENCE, SEQUENCE_EAGER  # noqa: F401
from kernels.bench_summary import read_stream, summarize  # noqa: F401 - scripts/gpu_status.py imports them here

# The parts of a run, in the default order: the copy ceiling, bf16 (the targets' dtype, with the host-bound
# shapes), the LN-LSTM, the backward profile, then bf16 activations with fp32 γ/β, fp32, the LN-GRU and
# fp16 (which behaves like bf16), so a run cut short by a time limit still leaves the most important
# figures in the .jsonl stream. `--parts` picks and orders them, so a second call can measure what a first
# one's budget did not reach.
PARTS = ("copy", "ln:bf16", "lstm", "profile", "ln:bf16+fp32w", "ln:fp32", "gru", "ln:fp16")


def _shard(text: str) -> tuple[int, int]:
    try:
        i, k = (int(v) for v in text.split("/"))
    except ValueError:
        i, k = -1, 0
    if not 0 <= i < k:
        raise argparse.ArgumentTypeError(f"--shard takes I/K with 0 <= I < K, e.g. 0/4; got {text!r}")
    return i, k


def _parts(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(
            f"unknown part(s) {', '.join(unknown) or '(none given)'}; give a "
            f"comma-separated list of {', '.join(PARTS)}"
        )
    return parts


def _with_compiled(args, dname: str) -> bool:
    """Whether this dtype's cases time the torch.compile baseline (--quick: bf16 only; --smoke: no, unless
    --compiled)."""
    return (args.compiled or not args.smoke) and (not args.quick or dname == "bf16")


def precompile(impls, args, grid: dict, parts: list[str]) -> dict:
    """Compile the torch.compile baselines of the LayerNorm parts ahead of the benchmark, for processes side
    by side (`--precompile --shard I/K`: every K-th (dtype, N) from the I-th). Each graph is compiled as
    `_bench_ln_case` first compiles it (the grid's first M, the same calls in the same order), so the
    benchmark's own compiles load it from inductor's on-disk caches (FX graph, AOTAutograd, Triton; M is
    dynamic, N static). Autotuning choices made here, beside other GPU work, are not saved: the benchmark
    makes its own. Returns the compile-cache counters."""
    import torch._inductor.config as inductor_config

    inductor_config.autotune_local_cache = False
    i, k = args.shard
    jobs = [
        (p[3:], N) for p in parts if p.startswith("ln:") and _with_compiled(args, p[3:]) for N in grid["N"]
    ][i::k]
    for dname, N in jobs:
        name = _compiled_impl(dname)
        x, w, b, dy = _case_inputs(grid["M"][0], N, dname)
        xg, wg, bg = _leaves(name, x, w, b)
        try:
            y = impls[name](xg, wg, bg)
        except RuntimeError:  # the benchmark records the error row itself
            continue
        with torch.no_grad():
            impls[name](x, w, b)
        y.backward(dy, retain_graph=True)
    return {"precompiled": [f"{d} N={N}" for d, N in jobs], "compile_cache": compile_cache()}


def _emit(stream, kind: str, row: dict) -> None:
    if stream:
        stream.write(json.dumps({kind: row}) + "\n")
        stream.flush()


def _run_recurrent(args, stream, over_budget, cell: str) -> list[dict]:
    """The LN-LSTM or LN-GRU part over its cases and precisions, printed and streamed as it goes (until the
    time budget is spent)."""
    cases = bench_rnn.SMOKE_CASES if args.smoke else bench_rnn.QUICK_CASES if args.quick else bench_rnn.CASES
    precisions = bench_rnn.PRECISIONS if args.lstm_precision == "both" else (args.lstm_precision,)
    rep = max(args.rep_ms, 50.0)
    out = []
    for prec in precisions:
        for B, T, H in cases:
            if over_budget(f"{cell} B={B} T={T} H={H} {prec}"):
                continue
            rows = bench_rnn.bench_case(cell, B, T, H, prec, lambda fn: _ms(fn, rep), bench_ln.DEVICE)
            out += rows
            for r in rows:
                _emit(stream, f"ln_{cell}", r)
                if not args.json:
                    print(
                        f"{cell.upper()} B={B:3d} T={T:3d} H={H:4d} {prec} {r['impl']:40s} {r['ms']:9.3f} "
                        f"ms x{r['x_cudnn']:.2f} of cuDNN",
                        flush=True,
                    )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="normlab bench kernel", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--out", type=Path, help="write kernel_bench.json (+ .jsonl as it goes) into this folder")
    p.add_argument("--quick", action="store_true", help="a subset of the matrix (about a minute)")
    p.add_argument("--rep-ms", type=float, default=20.0, help="timed milliseconds per measurement (median)")
    p.add_argument("--no-lstm", action="store_true", help="skip the LN-LSTM and LN-GRU parts")
    p.add_argument(
        "--lstm-precision",
        choices=("both", "tf32", "fp32"),
        default="both",
        help="fp32 matmuls in the LN-LSTM and LN-GRU parts: full fp32 (TF32 off) and TF32 for "
        "cuDNN and ours alike; 'both' (default) measures each case both ways",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="stop starting new cases after this many seconds and still write the summary of what "
        "was measured (the cases left out are listed under 'not_measured')",
    )
    p.add_argument(
        "--parts",
        type=_parts,
        metavar="PART,PART",
        help=f"what to measure, in this order (default: {','.join(PARTS)}; --quick leaves out ln:fp16)",
    )
    p.add_argument(
        "--summarize",
        type=Path,
        metavar="JSONL",
        help="no benchmark: print the targets' summary of the rows in a kernel_bench.jsonl",
    )
    p.add_argument(
        "--precompile",
        action="store_true",
        help="no benchmark: compile the torch.compile baselines of the chosen parts into "
        "inductor's on-disk caches (scripts/gpu_check.sh runs a few such processes while the "
        "tests run)",
    )
    p.add_argument(
        "--shard",
        type=_shard,
        default=(0, 1),
        metavar="I/K",
        help="with --precompile: this process's share, every K-th (dtype, N) from the I-th",
    )
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)  # --smoke with torch.compile
    args = p.parse_args(argv)
    if args.summarize:
        if not args.summarize.is_file():
            print(
                f"no such file: {args.summarize} (give the kernel_bench.jsonl a run streamed)",
                file=sys.stderr,
            )
            return 2
        ln_rows, lstm_rows, gru_rows = read_stream(args.summarize)
        print(
            json.dumps(
                {
                    "layer_norm_rows": len(ln_rows),
                    "ln_lstm_rows": len(lstm_rows),
                    "ln_gru_rows": len(gru_rows),
                    "summary": summarize(ln_rows, lstm_rows, gru_rows),
                },
                indent=None if args.json else 1,
            )
        )
        return 0
    bench_ln.DEVICE = "cpu" if args.smoke else "cuda"
    if not args.smoke and not torch.cuda.is_available():
        reason = "no CUDA GPU here: the kernel benchmark measures the compiled Triton kernels on a GPU"
        print(json.dumps({"skipped": reason}) if args.json else f"skipped: {reason}")
        return 0
    import triton

    torch.manual_seed(0)  # the same data on every run
    torch._dynamo.config.cache_size_limit = 4096  # one static compile per shape: never fall back to eager
    grid = SMOKE if args.smoke else QUICK if args.quick else FULL
    parts = args.parts or [p for p in PARTS if not (args.quick and p == "ln:fp16")]  # quick: no fp16
    impls = _ln_impls()
    if args.precompile:
        print(json.dumps(precompile(impls, args, grid, parts)))
        return 0
    stream = None
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stream = (args.out / "kernel_bench.jsonl").open("w")
    t0 = time.time()
    not_measured: list[str] = []

    def over_budget(case: str) -> bool:
        """True (and the case noted as not measured) once the time budget is spent."""
        if args.budget_s is not None and time.time() - t0 > args.budget_s:
            not_measured.append(case)
            return True
        return False

    ln_rows: list[dict] = []
    lstm_rows: list[dict] = []
    gru_rows: list[dict] = []
    extra: dict = {"copy": None, "profile": []}
    for part in parts:
        if part in ("copy", "profile"):
            if bench_ln.DEVICE == "cpu" or over_budget(
                part
            ):  # --smoke: no device copy or CUDA profile to take
                continue
            if part == "copy":
                extra["copy"] = bench_probe.copy_ceiling(
                    lambda fn: _ms_graph(fn, args.rep_ms) or _ms(fn, args.rep_ms), bench_ln.DEVICE
                )
                _emit(stream, "copy", extra["copy"])
            else:
                names = ["triton", "torch"] + (["liger"] if "liger" in impls else [])
                extra["profile"] = bench_probe.profile_backward({n: impls[n] for n in names}, bench_ln.DEVICE)
                for r in extra["profile"]:
                    _emit(stream, "profile", r)
            if not args.json:
                print(f"{part}: {json.dumps(extra[part])[:400]}", flush=True)
            continue
        if part in ("lstm", "gru"):
            if not args.no_lstm:
                rows = _run_recurrent(args, stream, over_budget, part)
                (lstm_rows if part == "lstm" else gru_rows).extend(rows)
            continue
        dname = part[3:]
        shapes = [(M, N) for M in grid["M"] for N in grid["N"]]
        if dname == "bf16" and grid is FULL:
            shapes = list(HOST_BOUND) + shapes
        for M, N in shapes:
            if M * N > MAX_ELEMS or over_budget(f"ln {dname} M={M} N={N}"):
                continue
            rows = bench_ln.bench_ln_case(impls, M, N, dname, args.rep_ms, _with_compiled(args, dname))
            ln_rows += rows
            for r in rows:
                _emit(stream, "layer_norm", r)
                if not args.json and "ms" in r:
                    print(
                        f"LN M={M:6d} N={N:6d} {dname:10s} {r['mode']:8s} {r['impl']:20s} "
                        f"{r['ms']:9.4f} ms (graph {r['ms_graph'] or 0:9.4f}) {r['GBps']:8.1f} GB/s "
                        f"{r['pct_peak']:5.1f}% err={r['max_err_y']:.2e}",
                        flush=True,
                    )
            if bench_ln.DEVICE == "cuda":
                torch.cuda.empty_cache()
    result = {
        "device": "cpu (smoke)" if args.smoke else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "peak_TBps": PEAK_TBS,
        "quick": args.quick,
        "parts": parts,
        "seconds": round(time.time() - t0, 1),
        "copy_ceiling": extra["copy"],
        "layer_norm": ln_rows,
        "ln_lstm": lstm_rows,
        "ln_gru": gru_rows,
        "backward_profile": extra["profile"],
        "not_measured": not_measured,
        "cuda_graphs": dict(graphs.stats),
        "compile_cache": compile_cache(),
        "summary": summarize(ln_rows, lstm_rows, gru_rows),
    }
    if args.out:
        (args.out / "kernel_bench.json").write_text(json.dumps(result, indent=1))
    if not_measured and not args.json:
        print(
            f"time budget ({args.budget_s:g} s) spent: {len(not_measured)} cases not measured, first "
            f"{not_measured[0]}",
            flush=True,
        )
    print(json.dumps(result) if args.json else json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
