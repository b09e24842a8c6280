"""Keep freed tensor memory in the process instead of handing it back to the kernel (glibc's malloc).

A training step allocates and frees the same large buffers every step (an LSTM layer's (T, B, 4H) work
tensors: 8 MiB each at B=32, T=64, H=256). glibc serves blocks above its mmap threshold with fresh
mappings and unmaps them on free, so every step paid a page fault per 4 KiB on first touch: 2,048–4,011
faults, ≈ 5 ms of a 33 ms LN-LSTM forward+backward on the 2-core VM. Raising the threshold to its
ceiling (32 MiB) and the trim threshold to 1 GiB keeps those blocks in the heap for reuse: 0 faults, 28 ms.
The cost: the process keeps its peak heap (as a training worker does anyway).

`keep_freed_memory(settings.malloc_tune)` runs when the engine is configured (train() and the engine's
benchmarks, via workers.engine.switches; a warm worker parent thus does it before it forks its children;
the API never runs the engine); NORMLAB_MALLOC_TUNE=false (Settings.malloc_tune) leaves malloc alone. It
takes effect once per process. A no-op off glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's ceiling on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 1 << 30

_done: bool | None = None


def keep_freed_memory(enabled: bool) -> bool:
    """Tune glibc's malloc as above (once per process; `enabled` False: leave it alone, this time).
    True when it took effect."""
    global _done
    if _done is not None:
        return _done
    if not enabled:
        return False
    _done = False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mmap_ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    _done = mmap_ok and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
