"""`EngineOptions`: which implementation computes each cell on each device, chosen once per run.

Each recurrent cell has one readable reference (the per-step loop in `workers.engine.recurrent`, torch
ops only) and one fast path per device:

- CPU, LSTM: the whole recurrence as one autograd node (`workers.engine.lstm_seq`), its per-step
  element-wise work in a C function compiled on first use (`c_step`; off, or without a compiler, torch's
  own ops run in that node instead);
- CUDA: the fused Triton cells and sequences (`kernel_backend`), replayed as CUDA graphs (`cuda_graphs`).

An edge (CLI, worker start, a benchmark's `main`) builds the options from its Settings; `build_model`
hands them to every layer that picks a path, `train()` records them in the run's result. Nothing here is
process-wide: two models in one process may run with different options side by side.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Literal

import torch
from torch import nn

import kernels
from normlab.settings import Settings

KernelBackend = Literal["auto", "torch", "triton"]
BACKENDS = ("auto", "torch", "triton")


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """The engine's path choices (defaults: every fast path where the device has one)."""

    # LayerNorm and fused recurrent cells: 'auto' = Triton on CUDA tensors, torch elsewhere; 'torch'
    # forces torch (A/B runs, twice-differentiable passes); 'triton' also below the size line
    kernel_backend: KernelBackend = "auto"
    # CUDA: replay each fused recurrence as one captured graph per shape (same numbers, less host time)
    cuda_graphs: bool = True
    # CPU float32 LSTM: the per-step element-wise work in C (compiled with `cc` into `cache_dir`)
    c_step: bool = True
    cc: str = ""
    cache_dir: Path = dataclasses.field(default_factory=lambda: Path.home() / ".cache" / "normlab")
    # CPU LSTM recurrence: threads of its per-step loop; None = all of torch's on an idle machine, one on
    # an oversubscribed one (the numbers are the same either way; see workers.engine.lstm_seq)
    recurrence_threads: int | None = None

    def __post_init__(self) -> None:
        if self.kernel_backend not in BACKENDS:
            raise ValueError(
                f"unknown kernel backend {self.kernel_backend!r}; use 'auto', 'torch' or 'triton'"
            )
        if self.recurrence_threads is not None and self.recurrence_threads < 1:
            raise ValueError(
                f"recurrence threads must be ≥ 1 (got {self.recurrence_threads}); use None for automatic"
            )

    @classmethod
    def from_settings(cls, settings: Settings) -> EngineOptions:
        """The options the settings ask for (NORMLAB_KERNEL_BACKEND, _CUDA_GRAPHS, _NATIVE_STEP, _CC,
        _CACHE_DIR)."""
        return cls(
            kernel_backend=settings.kernel_backend,
            cuda_graphs=settings.cuda_graphs,
            c_step=settings.native_step,
            cc=settings.cc,
            cache_dir=Path(settings.cache_dir),
        )

    def record(self) -> dict[str, str | bool]:
        """The path choices as a run records them (not where the compiler or its cache live)."""
        return {"kernel_backend": self.kernel_backend, "cuda_graphs": self.cuda_graphs, "c_step": self.c_step}

    def ln_calibrator(self, x: torch.Tensor):
        """The measured LayerNorm dispatch's calibrator for `x`: None off CUDA (torch computes LN there);
        on CUDA one per options object, its choices kept under `cache_dir` for the next worker process
        (kernels.make_calibrator), so a run does not measure again what an earlier one measured."""
        return self._calibrator if x.is_cuda else None

    @functools.cached_property
    def _calibrator(self):
        return kernels.make_calibrator(self.cache_dir / "kernels")

    def replace(self, **changes) -> EngineOptions:
        return dataclasses.replace(self, **changes)


DEFAULT = EngineOptions()


def apply_options(model: nn.Module, options: EngineOptions) -> nn.Module:
    """Give `options` to every layer of `model` that picks a path (those with an `engine_options`
    attribute: LayerNorm and the recurrent layers); returns the model."""
    for module in model.modules():
        if hasattr(module, "engine_options"):
            # nn.Module types its attributes Tensor | Module; these layers hold an EngineOptions
            module.engine_options = options  # type: ignore[assignment]
    return model
