"""A one-line progress bar on stderr (a terminal or a notebook cell), redrawn at most ~5 times a second."""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 24


class Progress:
    def __init__(self, label: str, total: int, stream: TextIO | None = None, every_s: float = 0.2):
        self.label, self.total = label, max(int(total), 1)
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self._last = 0.0
        self.lines = 0  # redraws so far

    def update(self, done: int, note: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        frac = min(max(done / self.total, 0.0), 1.0)
        bar = "█" * round(frac * WIDTH) + "░" * (WIDTH - round(frac * WIDTH))
        self.stream.write(f"\r{self.label} {bar} {done}/{self.total} {note}".rstrip() + "  ")
        self.stream.flush()
        self.lines += 1

    def close(self, note: str = "") -> None:
        self.stream.write(f"\r{self.label} {note}".rstrip() + " " * 40 + "\n")
        self.stream.flush()
