"""The LayerNorm part of `normlab bench kernel`: the matrix's cases, the implementations side by side, and
how each row is timed (`do_bench` with host time, `do_bench_cudagraph` without) and scored (GB/s on model
bytes, % of the H200's HBM peak, max error of y against float64). `kernels/bench.py` runs the parts.
"""

import time

import torch
import torch.nn.functional as F

import kernels
from kernels import bench_probe

PEAK_TBS = 4.8  # H200 HBM3e, vendor datasheet
FULL = {
    "M": (512, 4096, 16384, 32768, 65536),
    "N": (768, 1000, 1024, 2041, 2048, 4096, 4099, 5120, 8192, 16384, 32768, 65536),
}
QUICK = {"M": (4096, 32768), "N": (1024, 2041, 4096, 8192, 16384, 65536)}
MAX_ELEMS = 1 << 30  # M·N cap: x, y, dy, dx of 4 GB each in fp32 stay well inside 139 GiB
DTYPES = {
    "bf16": (torch.bfloat16, torch.bfloat16),
    "fp16": (torch.float16, torch.float16),
    "fp32": (torch.float32, torch.float32),
    "bf16+fp32w": (torch.bfloat16, torch.float32),
}
MODES = ("fwd", "bwd", "fwd+bwd")
BYTES_PER_ELEM = {"fwd": 2, "bwd": 3, "fwd+bwd": 5}
# --smoke: a CPU dry run of every code path under TRITON_INTERPRET=1 (the test suite runs it); no figures
# (and no torch.compile baseline, unless --compiled).
SMOKE = {"M": (8,), "N": (37,)}
# Host-bound shapes (bf16 only): where GPU time is below a launch's host time, so where the size-aware
# dispatch must send `kernels.layer_norm` to torch; with the matrix they locate the dispatch boundary.
HOST_BOUND = ((64, 768), (256, 1024), (1024, 1024), (2048, 2048))
DEVICE = "cuda"  # "cpu" for --smoke (kernels/bench.py sets it)


def _ms(fn, rep_ms: float, grad_to_none=None) -> float:
    """Median ms of fn with host time (`do_bench`: L2 flushed between runs; .grad reset outside the timed
    region)."""
    if DEVICE == "cpu":  # --smoke: one run proves the path; its time means nothing
        for t in grad_to_none or ():
            t.grad = None
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    from triton.testing import do_bench

    return float(
        do_bench(fn, warmup=max(1, rep_ms // 5), rep=rep_ms, grad_to_none=grad_to_none, return_mode="median")
    )


def _ms_graph(fn, rep_ms: float, grad_to_none=None) -> float | None:
    """Median ms of fn replayed as a CUDA graph (`do_bench_cudagraph`: GPU time, no host time); None on CPU
    or when fn cannot be captured (the reason is not a figure)."""
    if DEVICE == "cpu":
        return None
    from triton.testing import do_bench_cudagraph

    try:
        return float(do_bench_cudagraph(fn, rep=rep_ms, grad_to_none=grad_to_none, return_mode="median"))
    except Exception:  # noqa: BLE001 - e.g. a backward whose autograd stream is not the capture stream
        torch.cuda.synchronize()
        return None


def _ln_impls():
    def eager(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

    def tri(x, w, b):
        return kernels.triton_layer_norm(x, w, b, 1e-5)

    def dispatched(x, w, b):  # what the engine calls: torch below kernels.LN_TRITON_MIN_ELEMS
        return kernels.layer_norm(x, w, b, 1e-5)

    def compiled_mixed(x, w, b):  # F.layer_norm refuses mixed dtypes: compile the upcast torch users write
        return F.layer_norm(x.float(), (x.shape[-1],), w, b, 1e-5).to(x.dtype)

    # The backward alone is timed by replaying one graph (retain_graph): compiled graphs must not donate
    # their saved buffers for that.
    torch._functorch.config.donated_buffer = False
    # Row count M marked dynamic, N static (see _mark): one inductor compile per (N, dtype, grad mode).
    impls = {
        "triton": tri,
        "normlab": dispatched,
        "torch": eager,
        "torch.compile": torch.compile(eager),
        "torch.compile/mixed": torch.compile(compiled_mixed),
    }
    liger = bench_probe.liger_layer_norm()
    if liger is not None:
        impls["liger"] = liger
    return impls


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


def _leaves(fn_name: str, x, w, b) -> tuple:
    """Fresh leaf copies of x, γ, β that need gradients; for a compiled fn, M marked dynamic on both sets."""
    xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))
    if fn_name.startswith("torch.compile"):
        _mark(x, w, b)
        _mark(xg, wg, bg)
    return xg, wg, bg


def compile_cache() -> dict:
    """Hits and misses of inductor's FX-graph and AOTAutograd caches in this process so far."""
    from torch._dynamo.utils import counters

    return {
        k: v for group in ("inductor", "aot_autograd") for k, v in counters[group].items() if "cache" in k
    }


def bench_ln_case(impls, M, N, dname, rep_ms, with_compiled) -> list[dict]:
    x, w, b, dy = _case_inputs(M, N, dname)
    rows = min(M, 256)
    ref = kernels.layer_norm_reference(x[:rows].double(), w.double(), b.double(), 1e-5)
    # torch's CUDA layer norm takes fp32 γ/β with bf16/fp16 x too; `normlab` only where it dispatches
    # differently from `triton` (below the size line it is torch itself)
    names = (
        ["triton", "normlab", "torch"]
        if DEVICE == "cpu" or M * N < kernels.LN_TRITON_MIN_ELEMS
        else ["triton", "torch"]
    )
    if with_compiled:
        names.append(_compiled_impl(dname))
    if "liger" in impls:
        names.append("liger")
    out = []
    for name in names:
        fn = impls[name]
        xg, wg, bg = _leaves(name, x, w, b)
        try:
            y = fn(xg, wg, bg)
        except Exception as exc:  # noqa: BLE001 - e.g. a torch build or baseline without mixed dtypes
            out.append({"M": M, "N": N, "dtype": dname, "impl": name, "error": str(exc)[:200]})
            continue
        leaves = [xg, wg, bg]
        err = float((y[:rows].detach().double() - ref).abs().max())
        for mode in MODES:
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            if mode == "fwd":

                def run(fn=fn):
                    with torch.no_grad():
                        fn(x, w, b)

                grads = None
            elif mode == "bwd":
                run, grads = (lambda y=y: y.backward(dy, retain_graph=True)), leaves
            else:
                run, grads = (lambda fn=fn, xg=xg, wg=wg, bg=bg: fn(xg, wg, bg).backward(dy)), leaves
            ms = _ms(run, rep_ms, grads)
            ms_graph = _ms_graph(run, rep_ms, grads)
            gpu = ms_graph if ms_graph is not None else ms
            gbs = BYTES_PER_ELEM[mode] * M * N * x.element_size() / gpu / 1e6
            out.append(
                {
                    "M": M,
                    "N": N,
                    "dtype": dname,
                    "mode": mode,
                    "impl": name,
                    "ms": round(ms, 5),
                    "ms_graph": None if ms_graph is None else round(ms_graph, 5),
                    "host_us": None if ms_graph is None else round(1e3 * max(0.0, ms - ms_graph), 2),
                    "GBps": round(gbs, 1),
                    "pct_peak": round(100 * gbs / (PEAK_TBS * 1000), 1),
                    "max_err_y": err,
                }
            )
        del y, xg, wg, bg, leaves
    return out
