"""Which LayerNorm runs on a CUDA tensor: the faster of the Triton kernels and `F.layer_norm`, measured.

The first time a (device, dtype, direction, shape class) is seen, both sides run a few times back to back
between two CUDA events (no cache flush, so host time shows when the call is host-bound), and the faster
one is used from then on. Decisions are kept per process and in a JSON file per device model in the cache
directory, so a worker that restarts does not measure again. "Never slower than torch" then holds by
construction on any GPU, within the timer's noise. The timer is injectable: tests drive it with a fake.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import torch

Timer = Callable[[Callable[[], object]], float]  # seconds per call of a no-argument function


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


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "normlab" / "kernels"


class Calibrator:
    """Chooses 'triton' or 'torch' per key, measuring once; the choices persist in `cache_dir`."""

    def __init__(self, timer: Timer | None = None, cache_dir: Path | None = None) -> None:
        self.timer = timer or cuda_timer
        self.cache_dir = cache_dir
        self.choices: dict[str, dict[str, str]] = {}  # device model -> key -> choice
        self.measured: dict[str, dict[str, float]] = {}  # key -> {'triton': s, 'torch': s}, this process
        self._lock = threading.Lock()

    def _file(self, device: str) -> Path | None:
        if self.cache_dir is None:
            return None
        safe = "".join(c if c.isalnum() else "_" for c in device)
        return Path(self.cache_dir) / f"layer_norm_{safe}.json"

    def _known(self, device: str) -> dict[str, str]:
        known = self.choices.get(device)
        if known is None:
            known = {}
            path = self._file(device)
            if path is not None and path.exists():
                try:
                    loaded = json.loads(path.read_text())
                    known = {k: v for k, v in loaded.items() if v in ("triton", "torch")}
                except (OSError, ValueError):
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

    def choose(
        self, device: str, key: str, triton_fn: Callable[[], object], torch_fn: Callable[[], object]
    ) -> str:
        """'triton' or 'torch' for `key` on `device` (a device model name), measuring the two at most once."""
        known = self._known(device)
        choice = known.get(key)
        if choice is not None:
            return choice
        with self._lock:
            choice = known.get(key)
            if choice is None:
                t_triton, t_torch = self.timer(triton_fn), self.timer(torch_fn)
                self.measured[key] = {"triton": t_triton, "torch": t_torch}
                choice = known[key] = "triton" if t_triton < t_torch else "torch"
                self._save(device)
        return choice

    def record(self) -> dict[str, str]:
        """Every choice this process has made or loaded, as '<device> | <key>' -> choice (run summaries)."""
        return {f"{dev} | {key}": c for dev, keys in self.choices.items() for key, c in sorted(keys.items())}


CALIBRATOR = Calibrator(cache_dir=default_cache_dir())
