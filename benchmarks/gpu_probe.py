"""Timers and the `probe` step of the GPU check: where the forced-Triton backward's excess time goes.

The first H200 run showed fwd+bwd through autograd 450–560 µs slower than its kernels, almost flat in N.
The probe separates the candidates on one bf16 shape class at a time:
  kernels   forward_into + backward_into alone: CUDA-graph replay (GPU time only) and events (with host)
  autograd  triton_layer_norm fwd + torch.autograd.grad: events; its host time per step by perf_counter
  main      the same forward, then the backward's launches called on this thread (no autograd engine)
  graph     the autograd fwd+bwd captured once in a CUDA graph and replayed (no host, no engine thread)
  torch     F.layer_norm fwd + grad, for scale
  profile   torch.profiler over a few autograd steps: the top 15 ops by self CPU time, to probe_profile.txt
Reading: graph ≈ kernels → the excess is host time; main ≪ autograd → the engine thread or the GIL.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def bench(fn: Callable[[], object], reps: int = 10) -> float:
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


def graph_bench(fn: Callable[[], object], reps: int = 10) -> float | None:
    """Seconds per call of `fn` captured `reps` times in one CUDA graph and replayed: GPU time without
    host time. None when `fn` cannot be captured."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture: compiles, allocator pools, autograd state
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(reps):
                fn()
    except Exception:  # a capture failure is a finding, recorded as None
        return None
    return bench(graph.replay, 3) / reps


def host_seconds(fn: Callable[[], object], calls: int = 200) -> float:
    """Host seconds per call: the time to issue `calls` calls back to back (the GPU runs behind)."""
    import torch

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls
    torch.cuda.synchronize()
    return host


def probe_row(M: int, N: int, out_dir) -> dict:
    """One shape's probe figures in µs (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    import kernels
    from kernels import layer_norm_op

    x = torch.randn(M, N, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    w = torch.randn(N, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    b = torch.randn(N, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    dy = torch.randn_like(x)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    stats = torch.empty(2, M, device="cuda")
    xd, wd, bd = x.detach(), w.detach(), b.detach()

    def fwd_kernels():
        layer_norm_op.forward_into(xd, wd, bd, 1e-5, y, stats[0], stats[1])

    def bwd_kernels():
        layer_norm_op.backward_into(dy, xd, wd, stats[0], stats[1], dx, True, b.dtype)

    def autograd_step():
        torch.autograd.grad(kernels.triton_layer_norm(x, w, b), (x, w, b), dy)

    def main_thread_step():
        with torch.no_grad():
            _, mean, rstd = layer_norm_op.triton_forward(xd, wd, bd, 1e-5)
            layer_norm_op.triton_backward(dy, xd, wd, mean, rstd, True, b.dtype)

    def torch_step():
        torch.autograd.grad(F.layer_norm(x, (N,), w, b), (x, w, b), dy)

    fwd_kernels()
    us = 1e6
    row: dict = {"N": N, "M": M}
    row["kernels_graph_us"] = {d: (t or 0) * us for d, t in (("fwd", graph_bench(fwd_kernels)),
                                                              ("bwd", graph_bench(bwd_kernels)))}  # fmt: skip
    row["kernels_events_us"] = {"fwd": bench(fwd_kernels) * us, "bwd": bench(bwd_kernels) * us}
    row["autograd_events_us"] = bench(autograd_step) * us
    row["autograd_host_us"] = host_seconds(autograd_step) * us
    row["main_thread_events_us"] = bench(main_thread_step) * us
    graphed = graph_bench(autograd_step)
    row["autograd_graph_us"] = None if graphed is None else graphed * us
    row["torch_events_us"] = bench(torch_step) * us
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            autograd_step()
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    with open(out_dir / "probe_profile.txt", "a") as f:
        f.write(f"--- bf16 M={M} N={N}: triton_layer_norm fwd + autograd.grad, 5 steps\n{table}\n")
    return row
