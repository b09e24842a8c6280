"""`RunCloser`: a run's terminal status is written exactly once, and a cancel takes effect within about
half a second in every phase, even where the engine cannot look at its stop flag.

The engine checks `should_stop()` before every training step, which ends a run that is training within
a step. Set-up (data, model, the first CUDA call), a long evaluation, a probe or one very long step do
not look at it. So in a run's own child process (the prefork pool forks one per run) a thread watches
the flag: once a cancel is seen, the engine gets `grace_s` to stop by itself (its own terminal event,
with its metrics); after that the thread records `cancelled` itself — the pending events, the terminal
status event and the run's final columns in one transaction, as `EventWriter.close` always does — and
ends the child with `os._exit`. Whichever side closes first holds the lock until the process ends, so
the other never writes a second terminal event. Outside a pool child (the solo pool of the tests, the
CLI) the thread is not started and cancel stays cooperative.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

from normlab.feed.writer import EventWriter, RunWatch
from normlab_client.events import Event, RunStatus, RunSummary

log = logging.getLogger(__name__)
_hard_exit_allowed = False


def allow_hard_exit() -> None:
    """Called in each prefork pool child as it starts (Celery's worker_process_init): this process
    exists for one run, so ending it ends nothing else."""
    global _hard_exit_allowed
    _hard_exit_allowed = True


class RunCloser:
    """Owns the end of one run: `emit` passes events to the writer, `close` writes the end once."""

    def __init__(
        self,
        writer: EventWriter,
        watch: RunWatch,
        *,
        hard_exit: bool | None = None,
        grace_s: float = 0.25,
        poll_s: float = 0.05,
    ):
        self.writer, self.watch, self.grace_s, self.poll_s = writer, watch, grace_s, poll_s
        self.last_step = 0
        self.started = time.time()
        self._lock = threading.Lock()
        self._closed = False
        self._returned = threading.Event()
        self._thread: threading.Thread | None = None
        if _hard_exit_allowed if hard_exit is None else hard_exit:
            self._thread = threading.Thread(target=self._watch, name="run-closer", daemon=True)
            self._thread.start()

    def emit(self, event: Event) -> None:
        self.last_step = event.step if event.step > self.last_step else self.last_step
        self.writer.emit(event)

    def engine_returned(self) -> None:
        """The engine is done (its terminal event, if any, is with the writer): no forced end now."""
        self._returned.set()

    def close(self, finish: dict, fallback_status: dict) -> bool:
        """Write the run's end (see EventWriter.close) unless it was already written; True if written."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            self.writer.close(finish, fallback_status)
            return True

    def _watch(self) -> None:
        while not self._returned.wait(self.poll_s):
            if not self.watch.should_stop():
                continue
            seen = time.monotonic()
            if self._returned.wait(self.grace_s):
                return
            self._force(time.monotonic() - seen)

    def _force(self, waited: float) -> None:
        if self.writer.broken:  # not a cancel: the store refused our events (the run was declared lost)
            log.error(
                "run %s: the store refuses its events and the engine does not stop; ending the process",
                self.writer.run_id,
            )
            logging.shutdown()
            os._exit(1)
        now = time.time()
        step = self.last_step
        message = (
            f"Cancelled at step {step}: the run was setting up or inside a long step, evaluation "
            f"or probe, so the worker ended it ({waited:.2f} s after the request was seen)."
        )
        summary = RunSummary(metrics={}, step=step, wall_time=now - self.started)
        finish = {
            "status": RunStatus.CANCELLED,
            "finished_at": now,
            "error": None,
            "summary": json.dumps(summary.model_dump(mode="json")),
        }
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self.writer.close(
                    finish,
                    {
                        "status": RunStatus.CANCELLED,
                        "message": message,
                        "metrics": {},
                        "step": step,
                        "time": now,
                    },
                )
                log.warning("run %s: %s", self.writer.run_id, message)
            finally:
                # Still holding the lock: the engine's thread can never write a second end.
                logging.shutdown()
                os._exit(0)
