"""`configure(settings)`: the engine's process-wide switches, set from the settings an edge built.

The engine reads no environment: `train()` calls this with the settings it was given, and a benchmark
that drives the engine's pieces directly calls it from its `main` with the settings of its command line.
Each switch is its module's own (see there): the kernel backend and CUDA-graph replay (kernels), the
oneDNN products (onednn), the LSTM's C step (native), and malloc keeping freed blocks (allocator: no
page faults for each step's (T, B, 4H) work tensors; once per process).
"""

from __future__ import annotations

import kernels
from kernels import graphs
from normlab.settings import Settings
from workers.engine import allocator, native, onednn


def configure(settings: Settings) -> None:
    """Set every engine switch from `settings` for this process."""
    kernels.set_backend(settings.kernel_backend)
    graphs.set_enabled(settings.cuda_graphs)
    onednn.configure(settings.onednn)
    native.configure(settings)
    allocator.keep_freed_memory(settings.malloc_tune)
