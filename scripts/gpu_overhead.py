"""Where the Triton LayerNorm's time goes on a GPU: host time per call (small shapes, where the kernel is
microseconds), the CUDA kernels of one backward (large shapes), and host vs GPU time per step of the fused
LN-LSTM sequence. Diagnostic for issue 7; writes a text report to the folder given as its argument. Run on
the GPU machine:  python scripts/gpu_overhead.py OUT  (scripts/gpu_check.sh runs it last)"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

import kernels
from kernels import graphs

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
report = out / "overhead.txt"
if not torch.cuda.is_available():
    report.write_text("skipped: no CUDA GPU here\n")
    print("skipped: no CUDA GPU here (this diagnostic times CUDA launches)")
    sys.exit(0)
report.write_text("")


def say(*a):
    """Print and append to the report at once: a run cut by gpu_check.sh's time limit keeps what it found."""
    text = " ".join(str(x) for x in a)
    with report.open("a") as f:
        f.write(text + "\n")
    print(text, flush=True)


def host_us(fn, n=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return host, (time.perf_counter() - t) / n * 1e6


dev = "cuda"
try:
    x = torch.randn(512, 768, device=dev, dtype=torch.bfloat16)
    w = torch.ones(768, device=dev)
    b = torch.zeros(768, device=dev)
    for name, fn in [
        ("triton_layer_norm", lambda: kernels.triton_layer_norm(x, w, b, 1e-5)),
        ("kernels.layer_norm", lambda: kernels.layer_norm(x, w, b, 1e-5)),
        ("F.layer_norm", lambda: F.layer_norm(x, (768,), w.bfloat16(), b.bfloat16(), 1e-5)),
    ]:
        h, total = host_us(fn)
        say(f"fwd 512x768 bf16 {name}: host {h:.1f} us/call, with sync {total:.1f} us/call")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            kernels.triton_layer_norm(x, w, b, 1e-5)
        torch.cuda.synchronize()
    say(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))
except Exception:  # noqa: BLE001
    say(traceback.format_exc())

try:
    X = torch.randn(4096, 8192, device=dev, dtype=torch.bfloat16, requires_grad=True)
    W = torch.ones(8192, device=dev, requires_grad=True)
    B_ = torch.zeros(8192, device=dev, requires_grad=True)
    y = kernels.triton_layer_norm(X, W, B_, 1e-5)
    g = torch.randn_like(y)
    for _ in range(3):
        torch.autograd.grad(y, (X, W, B_), g, retain_graph=True)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            torch.autograd.grad(y, (X, W, B_), g, retain_graph=True)
        torch.cuda.synchronize()
    say(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))
except Exception:  # noqa: BLE001
    say(traceback.format_exc())

try:
    Bt, H = 32, 256
    hh = torch.randn(Bt, 4 * H, device=dev)
    xx = torch.randn(Bt, 4 * H, device=dev)
    c = torch.randn(Bt, H, device=dev)
    p4 = [torch.ones(4 * H, device=dev), torch.zeros(4 * H, device=dev)]
    ph = [torch.ones(H, device=dev), torch.zeros(H, device=dev)]
    cell = lambda: kernels.triton_ln_lstm_cell(hh, xx, c, *p4, *p4, p4[1], *ph, 1e-5)  # noqa: E731
    h_us, total = host_us(cell, 200)
    say(f"ln_lstm_cell fwd B=32 H=256: host {h_us:.1f} us/call, with sync {total:.1f} us/call")
except Exception:  # noqa: BLE001
    say(traceback.format_exc())

try:  # the whole recurrence as one node (what the engine runs on CUDA): host and GPU time per step
    T, Bt, H = 64, 32, 256
    ax = torch.randn(T, Bt, 4 * H, device=dev, requires_grad=True)
    w_h = (torch.randn(4 * H, H, device=dev) / H**0.5).requires_grad_()
    ps = [torch.ones(4 * H, device=dev, requires_grad=True) for _ in range(5)]
    ps += [torch.ones(H, device=dev, requires_grad=True) for _ in range(2)]
    h0 = torch.zeros(Bt, H, device=dev)
    lstm = torch.nn.LSTM(H, H).to(dev)
    xs = torch.randn(T, Bt, H, device=dev)

    def seq_fwd():
        with torch.no_grad():
            kernels.triton_ln_lstm_sequence(ax, w_h, *ps, h0, h0, 1e-5)

    def seq_fwd_bwd():
        kernels.triton_ln_lstm_sequence(ax, w_h, *ps, h0, h0, 1e-5).sum().backward()

    def seq_fwd_bwd_eager():  # the same launches from Python, no CUDA graph
        graphs.set_enabled(False)
        try:
            seq_fwd_bwd()
        finally:
            graphs.set_enabled(True)

    for name, fn, n in (
        ("sequence fwd", seq_fwd, 20),
        ("sequence fwd+bwd", seq_fwd_bwd, 10),
        ("sequence fwd+bwd without CUDA graph", seq_fwd_bwd_eager, 10),
        ("cuDNN nn.LSTM fwd+bwd", lambda: lstm(xs)[0].sum().backward(), 20),
    ):
        h_us, total = host_us(fn, n)
        say(
            f"{name} T={T} B={Bt} H={H}: host {h_us / T:.1f} us/step, with sync {total / T:.1f} us/step "
            f"({total / 1e3:.2f} ms/call)"
        )
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            seq_fwd_bwd()
        torch.cuda.synchronize()
    say(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    say(f"kernels.graphs: {graphs.stats}")
except Exception:  # noqa: BLE001
    say(traceback.format_exc())
