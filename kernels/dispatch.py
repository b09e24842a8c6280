"""A `Calibrator`: which of several implementations runs for a shape class, measured once, with a margin.

The first time a (device, key) is seen, every candidate runs a few times back to back between two CUDA
events (no cache flush, so host time shows when a call is host-bound) and the fastest is used from then
on, but a challenger must beat the baseline (torch) by `margin`: a noise-level tie keeps torch. The
caller's candidates are whole paths (for the LayerNorm: forward and backward through the autograd path
the engine runs), so "never slower than the baseline" holds by construction on any GPU, within the
timer's noise. Choices are kept per process and in a JSON file per (device model, fingerprint) in
`cache_dir`; the fingerprint hashes the kernel sources and the Triton/torch versions, so a changed kernel
or toolchain measures again instead of inheriting old choices. The caller builds one at its edge and
passes it down; the timer is injectable (tests drive it with a fake).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

Timer = Callable[[Callable[[], object]], float]  # seconds per call of a no-argument function
BASELINE = "torch"
MARGIN = 0.05  # a challenger must be ≥ 5 % faster than the baseline: the event timer's run-to-run noise


def cuda_timer(fn: Callable[[], object], reps: int = 20, trials: int = 3) -> float:
    """Seconds per call: `reps` calls back to back between two events, the best of `trials`."""
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / reps)
    return best


def shape_class(M: int, N: int) -> str:
    """Exact N (odd and even rows take other code paths), M to the next power of two."""
    return f"N={N},M<={1 << max(0, (M - 1).bit_length())}"


def fingerprint(*parts: str) -> str:
    """A short hash of `parts` (kernel sources, library versions): the cache file's name carries it."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


class Calibrator:
    """Chooses one candidate per (device, key), measuring once; the choices persist in `cache_dir`."""

    def __init__(
        self,
        timer: Timer | None = None,
        cache_dir: Path | None = None,
        margin: float = MARGIN,
        fingerprint: str = "",
    ) -> None:
        self.timer = timer or cuda_timer
        self.cache_dir = cache_dir
        self.margin = margin
        self.fingerprint = fingerprint
        self.choices: dict[str, dict[str, str]] = {}  # device model -> key -> choice
        # key -> seconds per call of each candidate, and 'first_use_s': what measuring cost (this process)
        self.measured: dict[str, dict[str, float]] = {}
        self.fast: dict[tuple, str] = {}  # the caller's per-call memo (exact shapes -> choice)
        self._lock = threading.Lock()

    def _file(self, device: str) -> Path | None:
        if self.cache_dir is None:
            return None
        safe = "".join(c if c.isalnum() else "_" for c in device)
        tag = f"_{self.fingerprint}" if self.fingerprint else ""
        return Path(self.cache_dir) / f"layer_norm_{safe}{tag}.json"

    def _known(self, device: str) -> dict[str, str]:
        known = self.choices.get(device)
        if known is None:
            known = {}
            path = self._file(device)
            if path is not None and path.exists():
                try:
                    loaded = json.loads(path.read_text())
                    known = {k: v for k, v in loaded.items() if isinstance(k, str) and isinstance(v, str)}
                except (OSError, ValueError, AttributeError):
                    known = {}  # an unreadable cache is measured again, never trusted
            self.choices[device] = known
        return known

    def _save(self, device: str) -> None:
        path = self._file(device)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.choices[device], indent=0, sort_keys=True))
            os.replace(tmp, path)  # readers see the old file or the new one, never half of one
        except OSError:
            pass  # a read-only cache costs a measurement per process, nothing else

    def known(self, device: str, key: str) -> str | None:
        """The stored choice for `key`, without measuring (a graph capture must not time anything)."""
        return self._known(device).get(key)

    def pick(self, times: Mapping[str, float]) -> str:
        """The baseline unless the fastest other candidate beats it by the margin."""
        best = min((name for name in times if name != BASELINE), key=times.__getitem__, default=None)
        if best is None or BASELINE not in times:
            return best or BASELINE
        return best if times[best] < (1.0 - self.margin) * times[BASELINE] else BASELINE

    def choose(self, device: str, key: str, candidates: Mapping[str, Callable[[], object]]) -> str:
        """The candidate for `key` on `device` (a device model name), measuring each at most once. A
        stored choice that is no longer a candidate is measured again."""
        known = self._known(device)
        stored = known.get(key)
        if stored is not None and stored in candidates:
            return stored
        with self._lock:
            choice = known.get(key)
            if choice is None or choice not in candidates:
                t0 = time.perf_counter()
                times = {name: self.timer(fn) for name, fn in candidates.items()}
                choice = known[key] = self.pick(times)
                self.measured[key] = {**times, "first_use_s": time.perf_counter() - t0}
                self._save(device)
        return choice

    def record(self) -> dict[str, str]:
        """Every choice this process has made or loaded, as '<device> | <key>' -> choice (run summaries)."""
        return {f"{dev} | {key}": c for dev, keys in self.choices.items() for key, c in sorted(keys.items())}
