"""The LSTM's per-step element-wise work in C (`lstm_step.c`), compiled on first use, via ctypes.

Per step the torch path makes ~12 forward and ~15 backward element-wise calls on (B, 4H) rows, each a
dispatch plus a pass over memory; the C step does them in one call, row by row while the row is in
cache. Only float32 CPU tensors take it; float64 (the exactness tests) and other devices keep torch.

The library is built with the machine's C compiler (`cc`, or EngineOptions.cc) as `-O3 -march=native` into
EngineOptions.cache_dir, named by a hash of the source, the flags and the CPU, written atomically so
concurrent workers do not race. Without a compiler, or with EngineOptions.c_step off, everything runs on
the torch path and `status(options)` says why. A built library is kept per (compiler, cache folder).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from workers.engine.options import EngineOptions

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("lstm_step.c")
FLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math", "-std=c11"]

POINTERS = (
    "xx",
    "gh",
    "bh",
    "gc",
    "bc",
    "c0",
    "gates",
    "cells",
    "tanh_c",
    "hs",
    "hh",
    "mean_h",
    "rstd_h",
    "mean_c",
    "rstd_c",
    "d_a",
    "dc",
    "d_gh",
    "d_bh",
    "d_gc",
    "d_bc",
    "scratch",
)


class LSTMContext(ctypes.Structure):
    """Mirror of `lstm_ctx` in lstm_step.c (field order and types must match)."""

    _fields_ = (
        [(name, ctypes.c_int64) for name in ("T", "B", "H", "S", "threads")]
        + [("eps", ctypes.c_float)]
        + [(name, ctypes.c_void_p) for name in POINTERS]
    )


def context(
    T: int, B: int, H: int, S: int, threads: int, eps: float, **tensors: torch.Tensor | None
) -> LSTMContext:
    """An lstm_ctx over these tensors (contiguous float32 CPU; None: a NULL pointer). The caller keeps
    the tensors alive while the context is used."""
    unknown = set(tensors) - set(POINTERS)
    if unknown:
        raise ValueError(f"no such lstm_ctx fields: {sorted(unknown)}")
    return LSTMContext(
        T,
        B,
        H,
        S,
        threads,
        eps,
        *[None if (t := tensors.get(n)) is None else t.data_ptr() for n in POINTERS],
    )


def _cpu_key() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
        lines = [ln for ln in info.splitlines() if ln.startswith(("model name", "flags"))][:2]
    except OSError:
        lines = []
    return platform.machine() + "|" + "|".join(lines)


def _build(cc: str, cache_dir: Path) -> tuple[ctypes.CDLL | None, str]:
    found = cc or shutil.which("cc") or shutil.which("gcc")
    if not found:
        return None, "no C compiler (cc/gcc) on this machine: the torch path runs instead"
    cc = found
    key = SOURCE.read_bytes() + " ".join([cc, *FLAGS, "-fopenmp", _cpu_key()]).encode()
    digest = hashlib.sha256(key).hexdigest()[:16]
    target = cache_dir / "native" / f"lstm_step-{digest}.so"
    if not target.exists():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
            os.close(fd)
            # OpenMP over the batch rows; the library then shares torch's libgomp (same soname, already
            # loaded), so its threads are torch's own. Without OpenMP the pragmas are ignored: one thread.
            for openmp in (["-fopenmp"], []):
                out = subprocess.run(
                    [cc, *FLAGS, *openmp, "-o", tmp, str(SOURCE), "-lm"],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                if out.returncode == 0:
                    break
            if out.returncode != 0:
                os.unlink(tmp)
                return None, f"compiling {SOURCE.name} failed: {out.stderr.strip()[:400]}"
            os.replace(tmp, target)  # atomic: a concurrent worker sees the old state or the whole file
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"could not build {SOURCE.name}: {exc}"
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as exc:
        return None, f"could not load {target}: {exc}"
    for name in ("lstm_fwd_step", "lstm_bwd_step"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.POINTER(LSTMContext), ctypes.c_int64, ctypes.c_void_p]
        fn.restype = None
    lib.lstm_sum_rows.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.lstm_sum_rows.restype = None
    return lib, f"compiled C step ({target})"


_BUILT: dict[tuple[str, Path], tuple[ctypes.CDLL | None, str]] = {}  # a cache, not a switch
OFF = "switched off (EngineOptions.c_step, NORMLAB_NATIVE_STEP=false)"


def library(options: EngineOptions) -> ctypes.CDLL | None:
    """The compiled library (built on the first call for this compiler and folder), or None when the
    options switch it off or it is unavailable (see `status`)."""
    if not options.c_step:
        return None
    key = (options.cc, Path(options.cache_dir))
    if key not in _BUILT:
        _BUILT[key] = _build(*key)
        if _BUILT[key][0] is None:
            log.info("LSTM C step unavailable: %s", _BUILT[key][1])
    return _BUILT[key][0]


def status(options: EngineOptions) -> str:
    """Where the library came from, or why there is none."""
    if not options.c_step:
        return OFF
    library(options)
    return _BUILT[(options.cc, Path(options.cache_dir))][1]


def applies(options: EngineOptions, *tensors: torch.Tensor | None) -> bool:
    """Whether these tensors take the C step (float32, CPU, contiguous; the library available)."""
    ok = all(
        t is None or (t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous())
        for t in tensors
    )
    return ok and library(options) is not None
