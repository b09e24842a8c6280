"""`die_with_parent()`: ask Linux to kill this process when its parent dies (PR_SET_PDEATHSIG).

`normlab up` sets it in each worker it starts (so a SIGKILL or an OOM kill of `up` leaves no orphan
training and consuming the queue), and every worker sets it in its pool child (so the child that
trains dies with the worker's main process too)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL, parent_pid: int | None = None) -> bool:
    """Arrange for `sig` when the parent exits; if `parent_pid` is given and the parent is already
    another process (it died before this call), exit now. False where prctl is unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # the parent died between fork and prctl: nobody would ever stop this process
    return True
