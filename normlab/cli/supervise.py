"""`WorkerPool`: `normlab up`'s worker processes, kept alive. A worker that exits (killed, crashed) is
reaped at once (no zombie), logged, and started again after a back-off that doubles while it keeps
dying young; `state()` says how many are alive for /api/health."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 30.0
HEALTHY_AFTER_S = 60.0  # a worker that lived this long starts again at the first back-off
CHECK_S = 0.2


class WorkerPool:
    def __init__(
        self, n: int, start_one: Callable[[int], subprocess.Popen[bytes]], say: Callable[[str], None]
    ):
        """`start_one(i)` starts worker slot i; `say` tells the operator (up's stderr)."""
        self.start_one, self.say = start_one, say
        self.procs = [start_one(i) for i in range(n)]
        now = time.monotonic()
        self._born = [now] * n
        self._backoff = [BACKOFF_FIRST_S] * n
        self._due: list[float | None] = [None] * n  # when a dead slot starts again
        self.restarts = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start_watching(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="worker-supervisor", daemon=True)
        self._thread.start()

    def state(self) -> dict[str, int]:
        with self._lock:
            alive = sum(p.poll() is None for p in self.procs)
            return {"configured": len(self.procs), "alive": alive, "restarts": self.restarts}

    def check(self, now: float | None = None) -> None:
        """One look: reap the dead, start those whose back-off is over."""
        now = time.monotonic() if now is None else now
        with self._lock:
            for i, p in enumerate(self.procs):
                if self._due[i] is None and p.poll() is not None:
                    _kill_group(p)  # its pool child, if it outlived it
                    lived = now - self._born[i]
                    if lived >= HEALTHY_AFTER_S:
                        self._backoff[i] = BACKOFF_FIRST_S
                    self._due[i] = now + self._backoff[i]
                    self.say(
                        f"normlab up: worker {i + 1} (pid {p.pid}) exited with {p.returncode} after "
                        f"{lived:.0f} s; starting it again in {self._backoff[i]:.0f} s"
                    )
                    self._backoff[i] = min(BACKOFF_MAX_S, 2 * self._backoff[i])
                due = self._due[i]
                if due is not None and now >= due and not self._stop.is_set():
                    _close_ready_fd(p)
                    self.procs[i] = self.start_one(i)
                    self._born[i], self._due[i] = now, None
                    self.restarts += 1

    def _watch(self) -> None:
        while not self._stop.wait(CHECK_S):
            try:
                self.check()
            except Exception:  # never let the supervisor die: it is what keeps the workers
                log.exception("worker supervisor")

    def stop(self, stop_procs: Callable[[list[subprocess.Popen[bytes]]], None]) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            stop_procs(self.procs)
            for p in self.procs:
                _close_ready_fd(p)


def _kill_group(p: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)


def _close_ready_fd(p: subprocess.Popen[bytes]) -> None:
    fd = getattr(p, "ready_fd", None)
    if fd is not None:
        p.ready_fd = None  # type: ignore[attr-defined]
        with contextlib.suppress(OSError):
            os.close(fd)
