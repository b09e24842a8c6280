"""normlab's kernels: `layer_norm(x, weight, bias, eps)` with a torch fallback.

The engine's LayerNorm calls `layer_norm`. For now it runs torch's native layer norm everywhere; the
Triton path (CUDA tensors) plugs in here. `backend_for(x)` says which backend a tensor would use, so
every run can record it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_FORCED: str = "auto"  # 'auto' | 'torch' | 'triton'


def set_backend(name: str) -> None:
    """Choose the backend: 'auto' (Triton on CUDA, torch otherwise), 'torch' (A/B runs) or 'triton'."""
    global _FORCED
    if name not in ("auto", "torch", "triton"):
        raise ValueError(f"unknown kernel backend {name!r}; use 'auto', 'torch' or 'triton'")
    _FORCED = name


def backend_for(x: torch.Tensor) -> str:
    """The backend `layer_norm` uses for this tensor: 'torch' or 'triton'."""
    return "torch"


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
               eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dimension (eq. 15: population variance), then gain and bias."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
