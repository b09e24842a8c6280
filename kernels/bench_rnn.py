"""The recurrent part of `normlab bench kernel`: fused LN-LSTM / LN-GRU sequences against cuDNN, fwd+bwd.

Each case times, side by side in one process: cuDNN `nn.LSTM` (no norm) at the case's precision, the fused
LN-LSTM sequence (one autograd node; with and without CUDA graphs), the fused cell called per step, the
plain PyTorch LN-LSTM, and cuDNN in fp16 as a reference; the LN-GRU likewise against `nn.GRU`. Precision:
'fp32' runs every fp32 matmul without TF32 (cuDNN's LSTM and torch's products alike), 'tf32' with TF32
for both: the first H200 run compared our fp32 against cuDNN's TF32. Issue 20's target: the fused
sequence ≤ 1.3× cuDNN at B=32 T=128 H=512, at the same precision. (The engine's own layer is timed by
`workers/engine/bench_cuda.py`: kernels/ imports nothing of ours.)
"""

import torch

import kernels
from kernels import graphs

SEQUENCE = "fused LN-LSTM (triton sequence)"  # the row issue 20's ≤ 1.3× cuDNN target is checked on
SEQUENCE_EAGER = "fused LN-LSTM (sequence, no CUDA graph)"  # the same launches from Python, for comparison
GRU_SEQUENCE = "fused LN-GRU (triton sequence)"
GRU_SEQUENCE_EAGER = "fused LN-GRU (sequence, no CUDA graph)"
CUDNN_FP16 = "cudnn fp16 (reference)"
# (B, T, H): the target shape first, then the two of kernel-round2.md's plan
CASES = ((32, 128, 512), (32, 64, 256), (128, 64, 1024))
QUICK_CASES = ((32, 128, 512),)
SMOKE_CASES = ((2, 3, 8),)
PRECISIONS = ("fp32", "tf32")


def _lstm_step_loop(cell, xs, w_h, w_x, ln, H):
    """fwd+bwd of a T-step LN-LSTM: one matmul for every step's W_x x_t, then the cell per step."""
    T, B, _ = xs.shape
    h = xs.new_zeros(B, H)
    c = xs.new_zeros(B, H)
    xx_all = xs @ w_x.t()
    hs = []
    for t in range(T):
        h, c = cell(h @ w_h.t(), xx_all[t], c, *ln, 1e-5)
        hs.append(h)
    torch.stack(hs).sum().backward()


def graphs_on(on: bool, fn):
    """fn with kernels.graphs switched on or off around it."""

    def run():
        graphs.set_enabled(on)
        try:
            fn()
        finally:
            graphs.set_enabled(True)

    return run


def _cudnn(module_cls, D, H, xs, dtype=None):
    module = module_cls(D, H).to(xs.device)
    x = xs
    if dtype is not None:
        module, x = module.to(dtype), xs.to(dtype)
    return lambda: module(x)[0].sum().backward()


def lstm_cases(B, T, H, device) -> dict:
    """name -> a fwd+bwd callable; the first is the baseline (cuDNN at the case's precision)."""
    D = H
    xs = torch.randn(T, B, D, device=device)
    w_h = (torch.randn(4 * H, H, device=device) / H**0.5).requires_grad_()
    w_x = (torch.randn(4 * H, D, device=device) / D**0.5).requires_grad_()
    ones, zeros = (lambda n: torch.ones(n, device=device)), (lambda n: torch.zeros(n, device=device))
    ln = [
        p.requires_grad_()
        for p in (ones(4 * H), zeros(4 * H), ones(4 * H), zeros(4 * H), zeros(4 * H), ones(H), zeros(H))
    ]
    h0 = xs.new_zeros(B, H)

    def sequence():  # one product for every step's W_x x_t, then the fused recurrence (one node)
        kernels.triton_ln_lstm_sequence(xs @ w_x.t(), w_h, *ln, h0, h0, 1e-5).sum().backward()

    def per_step(cell):
        return lambda: _lstm_step_loop(cell, xs, w_h, w_x, ln, H)

    cases = {
        "cudnn nn.LSTM (no norm)": _cudnn(torch.nn.LSTM, D, H, xs),
        SEQUENCE: graphs_on(True, sequence),
        SEQUENCE_EAGER: graphs_on(False, sequence),
        "fused LN-LSTM (triton cell per step)": per_step(kernels.triton_ln_lstm_cell),
        "plain PyTorch LN-LSTM": per_step(kernels.ln_lstm_cell_reference),
    }
    if xs.is_cuda:
        cases[CUDNN_FP16] = _cudnn(torch.nn.LSTM, D, H, xs, torch.float16)
    return cases


def gru_cases(B, T, H, device) -> dict:
    """The LN-GRU (eq. 26): the fused sequence with and without CUDA graphs, the plain PyTorch LN-GRU and
    cuDNN `nn.GRU` (first) and its fp16 reference."""
    D = H
    xs = torch.randn(T, B, D, device=device)
    w_x = (torch.randn(3 * H, D, device=device) / D**0.5).requires_grad_()
    w_rec = (torch.randn(3 * H, H, device=device) / H**0.5).requires_grad_()
    shapes = (2 * H, 2 * H, 2 * H, 2 * H, H, H, H, H)
    params = [
        (torch.ones(n, device=device) if k % 2 == 0 else torch.zeros(n, device=device)).requires_grad_()
        for k, n in enumerate(shapes)
    ]
    h0 = xs.new_zeros(B, H)

    def fused():
        kernels.triton_ln_gru_sequence(xs @ w_x.t(), w_rec, *params, h0, 1e-5).sum().backward()

    def plain():
        kernels.set_backend("torch")
        try:
            kernels.ln_gru_sequence(xs @ w_x.t(), w_rec, *params, h0, 1e-5).sum().backward()
        finally:
            kernels.set_backend("auto")

    cases = {
        "cudnn nn.GRU (no norm)": _cudnn(torch.nn.GRU, D, H, xs),
        GRU_SEQUENCE: graphs_on(True, fused),
        GRU_SEQUENCE_EAGER: graphs_on(False, fused),
        "plain PyTorch LN-GRU": plain,
    }
    if xs.is_cuda:
        cases["cudnn fp16 (reference)"] = _cudnn(torch.nn.GRU, D, H, xs, torch.float16)
    return cases


def time_cases(cases: dict, B: int, T: int, H: int, timer, graphed: str) -> list[dict]:
    """fwd+bwd ms of each case (`timer(fn) -> ms`), and each ÷ the first (cuDNN); the `graphed` row also
    records the bytes one replayed call copies besides its loop (kernels.graphs.stats)."""
    out = []
    for name, fn in cases.items():
        if torch.cuda.is_available():  # a shape's first call runs eagerly, its second captures the graphs:
            for _ in range(2):  # both before the timing, so the timer sizes its runs on the replays
                fn()
        row = {"B": B, "T": T, "H": H, "impl": name, "ms": round(timer(fn), 4)}
        if name == graphed:
            before = graphs.stats["copied_bytes"]
            fn()
            row["graph_copied_MiB"] = round((graphs.stats["copied_bytes"] - before) / 2**20, 2)
        out.append(row)
    base = out[0]["ms"]
    for row in out:
        row["x_cudnn"] = round(row["ms"] / base, 3)
    return out


def precision(name: str):
    """A context that sets cuDNN's and torch's matmul TF32 flags alike ('tf32' on, 'fp32' off)."""

    class _Flags:
        def __enter__(self):
            self.saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = name == "tf32"

        def __exit__(self, *exc):
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = self.saved

    return _Flags()


def bench_case(cell: str, B: int, T: int, H: int, prec: str, timer, device) -> list[dict]:
    """The rows of one (cell, B, T, H, precision) case."""
    with precision(prec):
        if cell == "lstm":
            rows = time_cases(lstm_cases(B, T, H, device), B, T, H, timer, SEQUENCE)
        else:
            rows = time_cases(gru_cases(B, T, H, device), B, T, H, timer, GRU_SEQUENCE)
    for r in rows:
        r["precision"] = prec
    return rows
