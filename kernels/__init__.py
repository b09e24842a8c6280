"""normlab's kernels: `layer_norm` and `ln_lstm_cell`, Triton on CUDA tensors and torch everywhere else.

The engine's LayerNorm calls `layer_norm(x, weight, bias, eps)`; its LN-LSTM calls `ln_lstm_cell(...)`.
On a CUDA tensor, with triton importable and the caller's `backend` not 'torch', both run the Triton
kernels (registered as torch custom ops, so `torch.compile` keeps them in the graph); otherwise the
torch reference runs. The backend is each call's argument ('auto' by default), never a process-wide
setting; `backend_for(x, backend)` says which one a tensor gets, so every run can record it.
`triton_layer_norm` / `triton_ln_lstm_cell` call the Triton path directly: on CPU tensors that works only
under TRITON_INTERPRET=1, set before the first call (the kernel modules are imported lazily then).
Triton may be missing (a CPU-only install): this package still imports and uses torch.
"""

from __future__ import annotations

import importlib

import torch

from kernels.reference import layer_norm_reference, ln_gru_cell_reference, ln_lstm_cell_reference

__all__ = [
    "backend_for",
    "check_backend",
    "layer_norm",
    "layer_norm_choices",
    "layer_norm_reference",
    "make_calibrator",
    "ln_backend_for",
    "ln_gru_cell",
    "ln_gru_cell_reference",
    "ln_gru_sequence",
    "ln_lstm_cell",
    "ln_lstm_cell_reference",
    "ln_lstm_sequence",
    "triton_available",
    "triton_layer_norm",
    "triton_ln_gru_cell",
    "triton_ln_gru_sequence",
    "triton_ln_lstm_cell",
    "triton_ln_lstm_sequence",
]

BACKENDS = ("auto", "torch", "triton")


def check_backend(name: str) -> str:
    """`name` if it is a backend this install can run ('auto': Triton on CUDA, torch otherwise; 'torch':
    A/B runs; 'triton'), else ValueError with what to use. On CUDA it also imports (and registers) the
    Triton ops now, not inside a torch.compile'd region."""
    if name not in BACKENDS:
        raise ValueError(f"unknown kernel backend {name!r}; use 'auto', 'torch' or 'triton'")
    if name == "triton" and not triton_available():
        raise ValueError(
            "kernel backend 'triton' needs the triton package; install normlab[kernels] or use 'auto'/'torch'"
        )
    if name != "torch" and torch.cuda.is_available() and triton_available():
        for module in ("layer_norm_autograd", "lstm_op", "gru_op", "lstm_seq_op", "gru_seq_op"):
            _module(module)
    return name


_TRITON_OK: bool | None = None  # plain globals, not lru_cache/importlib calls: torch.compile traces these
_MODULES: dict[str, object] = {}


def triton_available() -> bool:
    """True when the triton package imports (checked once; only asked about for CUDA tensors)."""
    global _TRITON_OK
    if _TRITON_OK is None:
        try:
            importlib.import_module("triton")
            _TRITON_OK = True
        except ImportError:
            _TRITON_OK = False
    return _TRITON_OK


def backend_for(x: torch.Tensor, backend: str = "auto") -> str:
    """The backend `layer_norm` / `ln_lstm_cell` use for this tensor under `backend`: 'triton' or 'torch'.

    'triton' only for CUDA tensors (the compiled kernels need a GPU); 'torch' forces torch everywhere.
    """
    if backend == "torch" or not x.is_cuda or not triton_available():  # cheap checks first
        return "torch"
    return "triton"


def ln_backend_for(x: torch.Tensor, backend: str = "auto") -> str:
    """What `layer_norm` does with this input under `backend`: 'torch', 'triton' (asked for) or 'measured'
    (on CUDA: the faster of the two for its shape class, timed on first use; `layer_norm_choices()` lists
    what was chosen)."""
    chosen = backend_for(x, backend)
    return chosen if chosen == "torch" or backend == "triton" else "measured"


def layer_norm_choices(calibrator=None) -> dict[str, str]:
    """The measured LayerNorm choices `calibrator` (default: the process's in-memory one) made or loaded:
    '<GPU> | <dtype>/<train|infer>/<shape class>' -> side."""
    if calibrator is not None:
        return calibrator.record()
    if "layer_norm_autograd" not in _MODULES:
        return {}
    return _ln_op().process_calibrator().record()


def make_calibrator(cache_dir=None, timer=None, margin=None):
    """A calibrator for the measured LayerNorm dispatch, its choices kept in `cache_dir` (None: in memory)
    under a hash of the kernel sources and the Triton/torch versions. Build it at the edge (worker start,
    a benchmark's main) and pass it to `layer_norm(..., calibrator=)`."""
    return _ln_op().make_calibrator(cache_dir, timer, margin)


def _module(name: str):
    """kernels.<name>, imported on first use (it imports triton and registers the custom ops)."""
    mod = _MODULES.get(name)
    if mod is None:
        mod = _MODULES[name] = importlib.import_module(f"kernels.{name}")
    return mod


def _ln_op():
    return _module("layer_norm_autograd")


def _lstm_op():
    return _module("lstm_op")


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
    backend: str = "auto",
    calibrator=None,
) -> torch.Tensor:
    """LayerNorm over the last dimension (eq. 15: population variance), then gain and bias.

    On CUDA the faster of the Triton kernels and torch's for the input's shape class, measured once by
    `calibrator` (`make_calibrator`; None: one in memory for this process, see kernels/dispatch.py), or
    Triton when `backend` is 'triton'; `F.layer_norm` otherwise."""
    chosen = ln_backend_for(x, backend)
    if chosen == "triton":
        return _ln_op().triton_layer_norm(x, weight, bias, eps)
    if chosen == "measured":
        return _ln_op().dispatched_layer_norm(x, weight, bias, eps, calibrator)
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def triton_layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm by the Triton kernels on any tensor (CPU needs TRITON_INTERPRET=1); differentiable."""
    return _ln_op().triton_layer_norm(x, weight, bias, eps)


def ln_lstm_cell(
    hh, xx, c_prev, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, eps: float = 1e-5, backend="auto"
):
    """(h, c) of one LN-LSTM step (eq. 20, gates f, i, o, g): fused Triton kernel on CUDA, torch otherwise.

    hh = h_{t-1} W_hᵀ and xx = x_t W_xᵀ are (B, 4H); c_prev (B, H); gain_h/bias_h/gain_x/bias_x/bias (4H,);
    gain_c/bias_c (H,).
    """
    args = (hh, xx, c_prev, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, eps)
    if backend_for(hh, backend) == "triton":
        return _lstm_op().triton_ln_lstm_cell(*args)
    return ln_lstm_cell_reference(*args)


def triton_ln_lstm_cell(
    hh, xx, c_prev, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, eps: float = 1e-5
):
    """(h, c) by the fused Triton LN-LSTM kernels on any tensor (CPU needs TRITON_INTERPRET=1)."""
    return _lstm_op().triton_ln_lstm_cell(
        hh, xx, c_prev, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, eps
    )


def ln_lstm_sequence(
    ax,
    w_h,
    gain_h,
    bias_h,
    gain_x,
    bias_x,
    bias,
    gain_c,
    bias_c,
    h0,
    c0,
    eps: float = 1e-5,
    *,
    backend: str = "auto",
    cuda_graphs: bool = True,
):
    """h_t of every step (T, B, H) of an LN-LSTM over ax = x W_xᵀ (T, B, 4H), from h0, c0 (B, H).

    On CUDA the whole recurrence is one autograd node over the fused Triton kernels (one product and one
    launch per step each way; `lstm_seq_op`), replayed as a CUDA graph unless `cuda_graphs` is False;
    otherwise the torch reference cell, step by step.
    """
    if backend_for(ax, backend) == "triton":
        return _module("lstm_seq_op").triton_ln_lstm_sequence(
            ax,
            w_h,
            gain_h,
            bias_h,
            gain_x,
            bias_x,
            bias,
            gain_c,
            bias_c,
            h0,
            c0,
            eps,
            cuda_graphs=cuda_graphs,
        )
    h, c, hs = h0, c0, []
    for t in range(ax.shape[0]):
        h, c = ln_lstm_cell_reference(
            h @ w_h.t(), ax[t], c, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, eps
        )
        hs.append(h)
    return torch.stack(hs) if hs else ax.new_empty(0, ax.shape[1], ax.shape[2] // 4)


def triton_ln_lstm_sequence(
    ax,
    w_h,
    gain_h,
    bias_h,
    gain_x,
    bias_x,
    bias,
    gain_c,
    bias_c,
    h0,
    c0,
    eps: float = 1e-5,
    *,
    cuda_graphs=True,
):
    """The LN-LSTM recurrence by the fused Triton kernels on any tensor (CPU needs TRITON_INTERPRET=1)."""
    return _module("lstm_seq_op").triton_ln_lstm_sequence(
        ax, w_h, gain_h, bias_h, gain_x, bias_x, bias, gain_c, bias_c, h0, c0, eps, cuda_graphs=cuda_graphs
    )


def ln_gru_cell(
    zr_h,
    zr_x,
    wx,
    uh,
    h_prev,
    gain_zr_h,
    bias_zr_h,
    gain_zr_x,
    bias_zr_x,
    gain_wx,
    bias_wx,
    gain_uh,
    bias_uh,
    eps: float = 1e-5,
    backend: str = "auto",
):
    """h of one LN-GRU step (eq. 26, gates z, r): fused Triton kernel on CUDA, torch otherwise.

    zr_h = h_{t-1} W_hᵀ and zr_x = x_t W_xᵀ are (B, 2H); wx = x_t Wᵀ, uh = h_{t-1} Uᵀ and h_prev (B, H);
    gain/bias of the two 2H normalizations (2H,), of the two H normalizations (H,).
    """
    args = (
        zr_h,
        zr_x,
        wx,
        uh,
        h_prev,
        gain_zr_h,
        bias_zr_h,
        gain_zr_x,
        bias_zr_x,
        gain_wx,
        bias_wx,
        gain_uh,
        bias_uh,
        eps,
    )
    if backend_for(h_prev, backend) == "triton":
        return _module("gru_op").triton_ln_gru_cell(*args)
    return ln_gru_cell_reference(*args)


def triton_ln_gru_cell(*args, **kwargs):
    """h by the fused Triton LN-GRU kernels on any tensor (CPU needs TRITON_INTERPRET=1)."""
    return _module("gru_op").triton_ln_gru_cell(*args, **kwargs)


def ln_gru_sequence(
    ax,
    w_rec,
    gain_zr_h,
    bias_zr_h,
    gain_zr_x,
    bias_zr_x,
    gain_wx,
    bias_wx,
    gain_uh,
    bias_uh,
    h0,
    eps: float = 1e-5,
    *,
    backend: str = "auto",
    cuda_graphs: bool = True,
):
    """h_t of every step (T, B, H) of an LN-GRU over ax = x [W_x; W]ᵀ (T, B, 3H), with w_rec = [W_h; U].

    On CUDA the whole recurrence is one autograd node over the fused Triton kernels (`gru_seq_op`),
    replayed as a CUDA graph unless `cuda_graphs` is False; otherwise the torch reference cell, step by
    step.
    """
    params = (gain_zr_h, bias_zr_h, gain_zr_x, bias_zr_x, gain_wx, bias_wx, gain_uh, bias_uh)
    if backend_for(ax, backend) == "triton":
        return _module("gru_seq_op").triton_ln_gru_sequence(
            ax, w_rec, *params, h0, eps, cuda_graphs=cuda_graphs
        )
    H = ax.shape[-1] // 3
    h, hs = h0, []
    for t in range(ax.shape[0]):
        rec = h @ w_rec.t()
        h = ln_gru_cell_reference(
            rec[:, : 2 * H], ax[t, :, : 2 * H], ax[t, :, 2 * H :], rec[:, 2 * H :], h, *params, eps
        )
        hs.append(h)
    return torch.stack(hs) if hs else ax.new_empty(0, ax.shape[1], H)


def triton_ln_gru_sequence(*args, **kwargs):
    """The LN-GRU recurrence by the fused Triton kernels on any tensor (CPU needs TRITON_INTERPRET=1)."""
    return _module("gru_seq_op").triton_ln_gru_sequence(*args, **kwargs)
