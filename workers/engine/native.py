"""The LSTM's per-step element-wise work in C (`lstm_step.c`), compiled on first use, via ctypes.

Per step the torch path makes ~12 forward and ~15 backward element-wise calls on (B, 4H) rows, each a
dispatch plus a pass over memory; the C step does them in one call, row by row while the row is in
cache. Only float32 CPU tensors take it; float64 (the exactness tests) and other devices keep torch.

The library is built with the machine's C compiler (`cc`, or Settings.cc = NORMLAB_CC) as
`-O3 -march=native` into Settings.cache_dir (NORMLAB_CACHE_DIR, default ~/.cache/normlab), named by a hash
of the source, the flags and the CPU, written atomically so concurrent workers do not race. Without a
compiler, or with NORMLAB_NATIVE_STEP=false, everything runs on the torch path and `status()` says why.
Those three settings reach this module through `configure(settings)` (train() calls it, via
workers.engine.switches); until something configures it, Settings' defaults apply. Nothing reads the
environment here.
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

from normlab.settings import Settings

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
        *[None if tensors.get(n) is None else tensors[n].data_ptr() for n in POINTERS],
    )


def _cpu_key() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
        lines = [ln for ln in info.splitlines() if ln.startswith(("model name", "flags"))][:2]
    except OSError:
        lines = []
    return platform.machine() + "|" + "|".join(lines)


def _build(settings: Settings) -> tuple[ctypes.CDLL | None, str]:
    if not settings.native_step:
        return None, "switched off (NORMLAB_NATIVE_STEP=false)"
    cc = settings.cc or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None, "no C compiler (cc/gcc) on this machine: the torch path runs instead"
    key = SOURCE.read_bytes() + " ".join([cc, *FLAGS, "-fopenmp", _cpu_key()]).encode()
    digest = hashlib.sha256(key).hexdigest()[:16]
    target = Path(settings.cache_dir) / "native" / f"lstm_step-{digest}.so"
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


_LIB: ctypes.CDLL | None = None
_STATUS: str | None = None
_SETTINGS: Settings | None = None  # set by configure(); None: Settings' defaults


def configure(settings: Settings) -> None:
    """Take the C step's switch, compiler and cache folder from `settings` for this process; when they
    differ from the ones in use, the library is looked up (or built) again on next use."""
    global _LIB, _STATUS, _SETTINGS
    if _key(settings) != _key(_current()):
        _LIB, _STATUS = None, None
    _SETTINGS = settings


def _current() -> Settings:
    return _SETTINGS or Settings.model_construct()  # model_construct: the defaults, no environment read


def _key(settings: Settings) -> tuple[bool, str, Path]:
    return settings.native_step, settings.cc, Path(settings.cache_dir)


def library() -> ctypes.CDLL | None:
    """The compiled library (built on the first call), or None when unavailable (see `status()`)."""
    global _LIB, _STATUS
    if _STATUS is None:
        _LIB, _STATUS = _build(_current())
        if _LIB is None:
            log.info("LSTM C step unavailable: %s", _STATUS)
    return _LIB


def status() -> str:
    library()
    return _STATUS or ""


def applies(*tensors: torch.Tensor | None) -> bool:
    """Whether these tensors take the C step (float32, CPU, contiguous; the library available)."""
    ok = all(
        t is None or (t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous())
        for t in tensors
    )
    return ok and library() is not None
