"""`normlab bench kernel [--json] [--out DIR] [--quick]`: Triton LayerNorm / LN-LSTM vs torch on one GPU.

Side by side in one process: the Triton LayerNorm, `F.layer_norm` eager and `torch.compile`d, over the
matrix of the kernel notes (M × N × dtype × forward / backward / forward+backward), as median time,
GB/s on model bytes (forward 2·M·N·s, backward 3·M·N·s, both 5·M·N·s) and % of the H200's 4.8 TB/s,
with the max error against a float64 reference; then, fwd+bwd against cuDNN `nn.LSTM`, the fused LN-LSTM
sequence (one autograd node; the row issue 7's target is checked on), the fused cell called per step, the
plain PyTorch LN-LSTM and the engine's LN-LSTM layer with each backend; last, the same for the LN-GRU
against cuDNN `nn.GRU` (no target: for information). Without CUDA it prints why and
exits 0 with {"skipped": reason}.
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
import torch.nn.functional as F

import kernels
from kernels import graphs

PEAK_TBS = 4.8  # H200 HBM3e, vendor datasheet
FULL = {"M": (512, 4096, 16384, 32768, 65536),
        "N": (768, 1000, 1024, 2041, 2048, 4096, 4099, 5120, 8192, 16384, 32768, 65536)}
QUICK = {"M": (4096, 32768), "N": (1024, 2041, 4096, 8192, 16384, 65536)}
MAX_ELEMS = 1 << 30  # M·N cap: x, y, dy, dx of 4 GB each in fp32 stay well inside 139 GiB
DTYPES = {"bf16": (torch.bfloat16, torch.bfloat16), "fp16": (torch.float16, torch.float16),
          "fp32": (torch.float32, torch.float32), "bf16+fp32w": (torch.bfloat16, torch.float32)}
MODES = ("fwd", "bwd", "fwd+bwd")
BYTES_PER_ELEM = {"fwd": 2, "bwd": 3, "fwd+bwd": 5}
LSTM_GRID = {"B": (8, 32, 128), "T": (64, 512), "H": (256, 512, 1024)}
LSTM_QUICK = {"B": (32,), "T": (64,), "H": (256, 1024)}
SEQUENCE = "fused LN-LSTM (triton sequence)"  # the row issue 7's ≤ 1.3× cuDNN target is checked on
SEQUENCE_EAGER = "fused LN-LSTM (sequence, no CUDA graph)"  # the same launches from Python, for comparison
GRU_SEQUENCE = "fused LN-GRU (triton sequence)"  # no target: for information
GRU_SEQUENCE_EAGER = "fused LN-GRU (sequence, no CUDA graph)"
# --smoke: a CPU dry run of every code path under TRITON_INTERPRET=1 (the test suite runs it); no figures
# (and no torch.compile baseline, unless --compiled).
SMOKE = {"M": (8,), "N": (37,)}
LSTM_SMOKE = {"B": (2,), "T": (3,), "H": (8,)}
DEVICE = "cuda"
# The parts of a run, in the default order: bf16 first (the targets' dtype), then the LN-LSTM, then bf16
# activations with fp32 γ/β, fp32 and fp16 (which behaves like bf16), so a run cut short by a time limit
# still leaves the most important figures in the .jsonl stream (on an H200 the 360 s limit ended inside
# fp32 with an older order); the LN-GRU (no target) last. `--parts` picks and orders them, so a second
# call can measure what a first one's budget did not reach.
PARTS = ("ln:bf16", "lstm", "ln:bf16+fp32w", "ln:fp32", "ln:fp16", "gru")


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
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(unknown) or '(none given)'}; give a "
                                         f"comma-separated list of {', '.join(PARTS)}")
    return parts


def _ms(fn, rep_ms: float, grad_to_none=None) -> float:
    """Median ms of fn (L2 flushed between runs; .grad reset outside the timed region)."""
    if DEVICE == "cpu":  # --smoke: one run proves the path; its time means nothing
        for t in grad_to_none or ():
            t.grad = None
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=max(1, rep_ms // 5), rep=rep_ms, grad_to_none=grad_to_none,
                          return_mode="median"))


def _ln_impls():
    def eager(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

    def tri(x, w, b):
        return kernels.triton_layer_norm(x, w, b, 1e-5)

    def compiled_mixed(x, w, b):  # F.layer_norm refuses mixed dtypes: compile the upcast torch users write
        return F.layer_norm(x.float(), (x.shape[-1],), w, b, 1e-5).to(x.dtype)

    # The backward alone is timed by replaying one graph (retain_graph): compiled graphs must not donate
    # their saved buffers for that.
    torch._functorch.config.donated_buffer = False
    # Row count M marked dynamic, N static (see _mark): one inductor compile per (N, dtype, grad mode).
    return {"triton": tri, "torch": eager, "torch.compile": torch.compile(eager),
            "torch.compile/mixed": torch.compile(compiled_mixed)}


def _mark(x, w, b):
    """M dynamic (it only changes the grid), N static (inductor specializes its reduction on it)."""
    torch._dynamo.mark_dynamic(x, 0)
    for t, d in ((x, 1), (w, 0), (b, 0)):
        torch._dynamo.mark_static(t, d)


def _case_inputs(M: int, N: int, dname: str) -> tuple:
    """x, γ, β and dy of one LayerNorm case."""
    xdt, wdt = DTYPES[dname]
    x = torch.randn(M, N, device=DEVICE, dtype=xdt)
    w = torch.randn(N, device=DEVICE, dtype=wdt) * 0.2 + 1
    b = torch.randn(N, device=DEVICE, dtype=wdt) * 0.2
    return x, w, b, torch.randn(M, N, device=DEVICE, dtype=xdt)


def _compiled_impl(dname: str) -> str:
    xdt, wdt = DTYPES[dname]
    return "torch.compile" if wdt == xdt else "torch.compile/mixed"


def _with_compiled(args, dname: str) -> bool:
    """Whether this dtype's cases time the torch.compile baseline (--quick: bf16 only; --smoke: no, unless
    --compiled)."""
    return (args.compiled or not args.smoke) and (not args.quick or dname == "bf16")


def _leaves(fn_name: str, x, w, b) -> tuple:
    """Fresh leaf copies of x, γ, β that need gradients; for a compiled fn, M marked dynamic on both sets."""
    xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))
    if fn_name.startswith("torch.compile"):
        _mark(x, w, b)
        _mark(xg, wg, bg)
    return xg, wg, bg


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
    jobs = [(p[3:], N) for p in parts if p.startswith("ln:") and _with_compiled(args, p[3:])
            for N in grid["N"]][i::k]
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


def compile_cache() -> dict:
    """Hits and misses of inductor's FX-graph and AOTAutograd caches in this process so far."""
    from torch._dynamo.utils import counters

    return {k: v for group in ("inductor", "aot_autograd") for k, v in counters[group].items()
            if "cache" in k}


def _bench_ln_case(impls, M, N, dname, rep_ms, with_compiled) -> list[dict]:
    x, w, b, dy = _case_inputs(M, N, dname)
    rows = min(M, 256)
    ref = kernels.layer_norm_reference(x[:rows].double(), w.double(), b.double(), 1e-5)
    names = ["triton", "torch"]  # torch's CUDA layer norm takes fp32 γ/β with bf16/fp16 x too
    if with_compiled:
        names.append(_compiled_impl(dname))
    out = []
    for name in names:
        fn = impls[name]
        xg, wg, bg = _leaves(name, x, w, b)
        try:
            y = fn(xg, wg, bg)
        except RuntimeError as exc:  # e.g. a torch build without mixed-dtype layer norm
            out.append({"M": M, "N": N, "dtype": dname, "impl": name, "error": str(exc)[:200]})
            continue
        leaves = [xg, wg, bg]
        err = float((y[:rows].detach().double() - ref).abs().max())
        for mode in MODES:
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            if mode == "fwd":
                with torch.no_grad():
                    ms = _ms(lambda fn=fn: fn(x, w, b), rep_ms)
            elif mode == "bwd":
                ms = _ms(lambda y=y: y.backward(dy, retain_graph=True), rep_ms, leaves)
            else:
                ms = _ms(lambda fn=fn, xg=xg, wg=wg, bg=bg: fn(xg, wg, bg).backward(dy), rep_ms, leaves)
            gbs = BYTES_PER_ELEM[mode] * M * N * x.element_size() / ms / 1e6
            out.append({"M": M, "N": N, "dtype": dname, "mode": mode, "impl": name, "ms": round(ms, 5),
                        "GBps": round(gbs, 1), "pct_peak": round(100 * gbs / (PEAK_TBS * 1000), 1),
                        "max_err_y": err})
        del y, xg, wg, bg, leaves
    return out


def _lstm_step_loop(cell, xs, w_h, params, H):
    """fwd+bwd of a T-step LN-LSTM: one matmul for every step's W_x x_t, then the cell per step."""
    T, B, _ = xs.shape
    h = xs.new_zeros(B, H)
    c = xs.new_zeros(B, H)
    xx_all = xs @ params["w_x"].t()
    hs = []
    for t in range(T):
        h, c = cell(h @ w_h.t(), xx_all[t], c, *params["ln"], 1e-5)
        hs.append(h)
    torch.stack(hs).sum().backward()


def _bench_lstm(B, T, H, rep_ms) -> list[dict]:
    dev, D = DEVICE, H
    xs = torch.randn(T, B, D, device=dev)
    w_h = (torch.randn(4 * H, H, device=dev) / H ** 0.5).requires_grad_()
    ln = [torch.ones(4 * H, device=dev), torch.zeros(4 * H, device=dev), torch.ones(4 * H, device=dev),
          torch.zeros(4 * H, device=dev), torch.zeros(4 * H, device=dev), torch.ones(H, device=dev),
          torch.zeros(H, device=dev)]
    params = {"w_x": (torch.randn(4 * H, D, device=dev) / D ** 0.5).requires_grad_(),
              "ln": [p.requires_grad_() for p in ln]}
    cudnn = torch.nn.LSTM(D, H).to(dev)
    h0 = xs.new_zeros(B, H)

    def sequence():  # one product for every step's W_x x_t, then the fused recurrence (one node)
        hs = kernels.triton_ln_lstm_sequence(xs @ params["w_x"].t(), w_h, *params["ln"], h0, h0, 1e-5)
        hs.sum().backward()

    cases = {
        "cudnn nn.LSTM (no norm)": lambda: cudnn(xs)[0].sum().backward(),
        SEQUENCE: _graphs_on(True, sequence),
        SEQUENCE_EAGER: _graphs_on(False, sequence),
        "fused LN-LSTM (triton cell per step)": lambda: _lstm_step_loop(kernels.triton_ln_lstm_cell, xs, w_h,
                                                                        params, H),
        "plain PyTorch LN-LSTM": lambda: _lstm_step_loop(kernels.ln_lstm_cell_reference, xs, w_h, params, H),
    }
    engine = _engine_lstm(D, H, dev)
    if engine is not None:
        def engine_with(backend):  # the engine's own LN-LSTM layer (triton: the fused sequence)
            def run():
                kernels.set_backend(backend)
                try:
                    engine(xs).sum().backward()
                finally:
                    kernels.set_backend("auto")
            return run

        cases["engine LN-LSTM (triton backend)"] = engine_with("triton")
        cases["engine LN-LSTM (torch backend)"] = engine_with("torch")
    return _time_cases(cases, B, T, H, rep_ms, SEQUENCE)


def _time_cases(cases: dict, B: int, T: int, H: int, rep_ms: float, graphed: str) -> list[dict]:
    """fwd+bwd ms of each case, and each ÷ the first (cuDNN); the `graphed` row also records the bytes
    one replayed call copies besides its loop (inputs in, outputs out: kernels.graphs.stats)."""
    out = []
    for name, fn in cases.items():
        if DEVICE == "cuda":  # a shape's first call runs eagerly, its second captures the CUDA graphs:
            for _ in range(2):  # both before the timing, so do_bench sizes its runs on the replays
                fn()
        ms = _ms(fn, rep_ms)
        row = {"B": B, "T": T, "H": H, "impl": name, "ms": round(ms, 4)}
        if name == graphed:
            before = graphs.stats["copied_bytes"]
            fn()
            row["graph_copied_MiB"] = round((graphs.stats["copied_bytes"] - before) / 2 ** 20, 2)
        out.append(row)
    base = out[0]["ms"]
    for row in out:
        row["x_cudnn"] = round(row["ms"] / base, 3)
    return out


def _graphs_on(on: bool, fn):
    """fn with kernels.graphs switched on or off around it."""
    def run():
        graphs.set_enabled(on)
        try:
            fn()
        finally:
            graphs.set_enabled(True)
    return run


def _bench_gru(B, T, H, rep_ms) -> list[dict]:
    """The LN-GRU (eq. 26; no target in issue 7): the fused sequence with and without CUDA graphs, the
    plain PyTorch LN-GRU (the torch reference cell per step) and cuDNN `nn.GRU`, fwd+bwd."""
    dev, D = DEVICE, H
    xs = torch.randn(T, B, D, device=dev)
    w_x = (torch.randn(3 * H, D, device=dev) / D ** 0.5).requires_grad_()
    w_rec = (torch.randn(3 * H, H, device=dev) / H ** 0.5).requires_grad_()
    params = [p.requires_grad_() for p in (torch.ones(2 * H, device=dev), torch.zeros(2 * H, device=dev),
                                           torch.ones(2 * H, device=dev), torch.zeros(2 * H, device=dev),
                                           torch.ones(H, device=dev), torch.zeros(H, device=dev),
                                           torch.ones(H, device=dev), torch.zeros(H, device=dev))]
    cudnn = torch.nn.GRU(D, H).to(dev)
    h0 = xs.new_zeros(B, H)

    def fused():
        kernels.triton_ln_gru_sequence(xs @ w_x.t(), w_rec, *params, h0, 1e-5).sum().backward()

    def plain():
        kernels.set_backend("torch")
        try:
            kernels.ln_gru_sequence(xs @ w_x.t(), w_rec, *params, h0, 1e-5).sum().backward()
        finally:
            kernels.set_backend("auto")

    cases = {"cudnn nn.GRU (no norm)": lambda: cudnn(xs)[0].sum().backward(),
             GRU_SEQUENCE: _graphs_on(True, fused), GRU_SEQUENCE_EAGER: _graphs_on(False, fused),
             "plain PyTorch LN-GRU": plain}
    return _time_cases(cases, B, T, H, rep_ms, GRU_SEQUENCE)


def _emit(stream, kind: str, row: dict) -> None:
    if stream:
        stream.write(json.dumps({kind: row}) + "\n")
        stream.flush()


def _run_recurrent(args, stream, over_budget, cell: str) -> list[dict]:
    """The LN-LSTM or LN-GRU part over its grid, printed and streamed as it goes (until the time budget is
    spent)."""
    lgrid = LSTM_SMOKE if args.smoke else LSTM_QUICK if args.quick else LSTM_GRID
    bench_one = _bench_lstm if cell == "lstm" else _bench_gru
    out = []
    # One matmul precision for every row: cuDNN's LSTM uses TF32 by default (torch.backends.cudnn.allow_tf32)
    # while torch's matmuls do not (torch.backends.cuda.matmul.allow_tf32), so the flags are set alike.
    tf32 = args.lstm_precision == "tf32"
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        for B in lgrid["B"]:
            for T in lgrid["T"]:
                for H in lgrid["H"]:
                    if over_budget(f"{cell} B={B} T={T} H={H}"):
                        continue
                    rows = bench_one(B, T, H, max(args.rep_ms, 50.0))
                    out += rows
                    for r in rows:
                        r["precision"] = args.lstm_precision
                        _emit(stream, f"ln_{cell}", r)
                        if not args.json:
                            print(f"{cell.upper()} B={B:3d} T={T:3d} H={H:4d} {r['impl']:40s} {r['ms']:9.3f} "
                                  f"ms x{r['x_cudnn']:.2f} of cuDNN", flush=True)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    return out


def _engine_lstm(D: int, H: int, dev: str):
    """The engine's LN-LSTM layer when importable (not on a bare GPU box without the service deps)."""
    try:
        from workers.engine.recurrent import LSTMLayer

        return LSTMLayer(D, H, norm="layer").to(dev)
    except Exception:  # noqa: BLE001 - any import/constructor problem just leaves this column out
        return None


def summarize(ln_rows: list[dict], lstm_rows: list[dict], gru_rows: list[dict] = ()) -> dict:
    """The issue's targets, checked on the rows measured."""
    key = {(r["M"], r["N"], r["dtype"], r["mode"], r["impl"]): r for r in ln_rows if "ms" in r}
    slower, fwd_big, bwd_big, bwd_speedup = [], [], [], []
    for (M, N, d, mode, impl), r in key.items():
        if impl != "triton":
            continue
        for other in ("torch", "torch.compile", "torch.compile/mixed"):
            o = key.get((M, N, d, mode, other))
            if o and o["ms"] < r["ms"]:
                slower.append({"M": M, "N": N, "dtype": d, "mode": mode, "vs": other,
                               "ratio": round(r["ms"] / o["ms"], 3)})
        if M * N >= 32 * 2 ** 20 and d == "bf16":
            (fwd_big if mode == "fwd" else bwd_big if mode == "bwd" else []).append(r["pct_peak"])
            t = key.get((M, N, d, "bwd", "torch"))
            if mode == "bwd" and t:
                bwd_speedup.append(t["ms"] / r["ms"])
    fused = [r for r in lstm_rows if r["impl"] == SEQUENCE]
    return {
        "fwd_bf16_big_min_pct_peak (target >= 85)": min(fwd_big, default=None),
        "bwd_bf16_big_min_pct_peak (target >= 80)": min(bwd_big, default=None),
        "bwd_bf16_big_min_speedup_vs_torch (target >= 1.5)": (round(min(bwd_speedup), 3) if bwd_speedup
                                                              else None),
        "triton_slower_than_a_baseline (target: none)": slower,
        "lstm_fused_sequence_max_x_cudnn (target <= 1.3)": max((r["x_cudnn"] for r in fused), default=None),
        "lstm_sequence_without_cuda_graph_max_x_cudnn": max(
            (r["x_cudnn"] for r in lstm_rows if r["impl"] == SEQUENCE_EAGER), default=None),
        "gru_fused_sequence_max_x_cudnn (no target)": max(
            (r["x_cudnn"] for r in gru_rows if r["impl"] == GRU_SEQUENCE), default=None),
    }


def read_stream(path: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """The LayerNorm, LN-LSTM and LN-GRU rows of a kernel_bench.jsonl (a run cut short leaves only that
    file)."""
    ln_rows, lstm_rows, gru_rows = [], [], []
    for line in path.read_text().splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:  # the last line of a killed run may be cut in half
            continue
        ln_rows += [item["layer_norm"]] if "layer_norm" in item else []
        lstm_rows += [item["ln_lstm"]] if "ln_lstm" in item else []
        gru_rows += [item["ln_gru"]] if "ln_gru" in item else []
    return ln_rows, lstm_rows, gru_rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="normlab bench kernel", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--out", type=Path, help="write kernel_bench.json (+ .jsonl as it goes) into this folder")
    p.add_argument("--quick", action="store_true", help="a subset of the matrix (about a minute)")
    p.add_argument("--rep-ms", type=float, default=20.0, help="timed milliseconds per measurement (median)")
    p.add_argument("--no-lstm", action="store_true", help="skip the LN-LSTM and LN-GRU parts")
    p.add_argument("--lstm-precision", choices=("tf32", "fp32"), default="tf32",
                   help="fp32 matmuls in the LN-LSTM and LN-GRU parts: TF32 (cuDNN's default) or full "
                        "fp32, alike for every row (default: tf32)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="stop starting new cases after this many seconds and still write the summary of what "
                        "was measured (the cases left out are listed under 'not_measured')")
    p.add_argument("--parts", type=_parts, metavar="PART,PART",
                   help=f"what to measure, in this order (default: {','.join(PARTS)}; --quick leaves out "
                        "ln:fp16)")
    p.add_argument("--summarize", type=Path, metavar="JSONL",
                   help="no benchmark: print the targets' summary of the rows in a kernel_bench.jsonl")
    p.add_argument("--precompile", action="store_true",
                   help="no benchmark: compile the torch.compile baselines of the chosen parts into "
                        "inductor's on-disk caches (scripts/gpu_check.sh runs a few such processes while the "
                        "tests run)")
    p.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/K",
                   help="with --precompile: this process's share, every K-th (dtype, N) from the I-th")
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)  # --smoke with torch.compile
    args = p.parse_args(argv)
    if args.summarize:
        if not args.summarize.is_file():
            print(f"no such file: {args.summarize} (give the kernel_bench.jsonl a run streamed)",
                  file=sys.stderr)
            return 2
        ln_rows, lstm_rows, gru_rows = read_stream(args.summarize)
        print(json.dumps({"layer_norm_rows": len(ln_rows), "ln_lstm_rows": len(lstm_rows),
                          "ln_gru_rows": len(gru_rows), "summary": summarize(ln_rows, lstm_rows, gru_rows)},
                         indent=None if args.json else 1))
        return 0
    global DEVICE
    DEVICE = "cpu" if args.smoke else "cuda"
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
    for part in parts:
        if part in ("lstm", "gru"):
            if not args.no_lstm:
                rows = _run_recurrent(args, stream, over_budget, part)
                (lstm_rows if part == "lstm" else gru_rows).extend(rows)
            continue
        dname = part[3:]
        for M in grid["M"]:
            for N in grid["N"]:
                if M * N > MAX_ELEMS or over_budget(f"ln {dname} M={M} N={N}"):
                    continue
                rows = _bench_ln_case(impls, M, N, dname, args.rep_ms, _with_compiled(args, dname))
                ln_rows += rows
                for r in rows:
                    _emit(stream, "layer_norm", r)
                    if not args.json and "ms" in r:
                        print(f"LN M={M:6d} N={N:6d} {dname:10s} {r['mode']:8s} {r['impl']:20s} "
                              f"{r['ms']:9.4f} ms {r['GBps']:8.1f} GB/s {r['pct_peak']:5.1f}% "
                              f"err={r['max_err_y']:.2e}", flush=True)
                if DEVICE == "cuda":
                    torch.cuda.empty_cache()
    result = {"device": "cpu (smoke)" if args.smoke else torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__, "peak_TBps": PEAK_TBS,
              "quick": args.quick, "parts": parts, "seconds": round(time.time() - t0, 1),
              "layer_norm": ln_rows, "ln_lstm": lstm_rows, "ln_gru": gru_rows, "not_measured": not_measured,
              "cuda_graphs": dict(graphs.stats), "compile_cache": compile_cache(),
              "summary": summarize(ln_rows, lstm_rows, gru_rows)}
    if args.out:
        (args.out / "kernel_bench.json").write_text(json.dumps(result, indent=1))
    if not_measured and not args.json:
        print(f"time budget ({args.budget_s:g} s) spent: {len(not_measured)} cases not measured, first "
              f"{not_measured[0]}", flush=True)
    print(json.dumps(result) if args.json else json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
