"""A run's whole training state as a checkpoint: capture it, save it (normlab.checkpoints writes the file
atomically with its checksum), load it back.

What a run needs to continue bit for bit: the model's parameters and buffers (BatchNorm's running
statistics among them), the optimizer's state and parameter groups, every random generator it draws
from (torch's CPU and CUDA ones, numpy's, Python's, the batch stream's and the probes' own), the batch
stream's place in its epoch, the step, and the loop's open logging window.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from normlab import checkpoints
from normlab_client.spec import RunSpec
from workers.engine import snapshot
from workers.engine.tasks.base import BatchStream

FORMAT = 1
log = logging.getLogger(__name__)


@dataclass
class LoopState:
    """Where the training loop stands after `step`: the logging window it has open and its clock."""

    step: int = 0
    window_loss: float = 0.0
    window_steps: int = 0
    window_time: float = 0.0
    elapsed: float = 0.0
    metrics: dict[str, float | None] = field(default_factory=dict)


def _rng_state() -> dict[str, Any]:
    # numpy's stub also allows the dict form (legacy=False); the default is the legacy tuple.
    state = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())
    kind, keys, pos, has_gauss, gauss = state
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)],
        "python": random.getstate(),
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])


def capture(
    spec: RunSpec, model: nn.Module, optimizer, stream: BatchStream, prober, loop: LoopState
) -> dict[str, Any]:
    """Everything the run needs to continue after `loop.step`, as one serializable dict."""
    return {
        "format": FORMAT,
        "spec": spec.model_dump_json(),
        "loop": vars(loop).copy(),
        "model": model.state_dict(),
        "frozen": [name for name, p in model.named_parameters() if not p.requires_grad],
        "optimizer": optimizer.state_dict(),
        "rng": _rng_state(),
        "data": stream.state_dict(),
        "probes": prober.rng_state() if prober is not None else None,  # the probes' own generator
    }


def serialize(state: dict[str, Any] | snapshot.Snapshot) -> list[bytes | memoryview]:
    """A checkpoint file's body, in parts (workers/engine/snapshot.py)."""
    return snapshot.encode(state if isinstance(state, snapshot.Snapshot) else snapshot.take(state))


@dataclass(frozen=True)
class Resume:
    """Where a resumed run (the same run, its worker lost) continues: from its checkpoint of `step`,
    its events numbered after `seq` (the last stored one), and nothing reported again for the steps up
    to `reported` (the last step whose events are stored: those steps are trained again, bit for bit
    on the CPU, but their events exist)."""

    step: int
    seq: int
    reported: int
    yielded: bool = False  # it gave its worker to an interactive run (else its worker was lost)


def copied(obj: Any) -> Any:
    """The state with every tensor copied: training goes on updating the live ones in place."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: copied(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [copied(v) for v in obj]
    return obj


class Writer:
    """Writes a run's checkpoints from a thread: the training loop only copies the state's tensors (so
    training may go on), while serializing, the checksum, the write, retention and the fsyncs happen
    beside it. `close()` waits until every checkpoint is whole and in place (a run reported ended has
    its last checkpoint there for any fork), not for the fsyncs: those follow on the thread, so the
    run's end does not wait on the disk (checkpoints.write, durable=False). A checkpoint the disk
    refuses (full, read-only, failing: an OSError) is skipped and listed in `failures`; the run trains
    on without it (the engine says so in its log)."""

    def __init__(self, root: Path, run_id: str, cap_bytes: int):
        self.root, self.run_id, self.cap_bytes = root, run_id, cap_bytes
        self._queue: queue.Queue[tuple[int, snapshot.Snapshot] | None] = queue.Queue()
        self._to_sync: queue.Queue[Path | None] = queue.Queue()
        self.error: BaseException | None = None  # a bug: ends the run
        self.failures: list[tuple[int, str]] = []  # (step, why) of checkpoints the disk refused
        self._told = 0
        self.cpu_s = 0.0  # the thread's CPU time serializing, hashing and writing
        self._submitted = self._placed = 0
        self._placed_cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name=f"checkpoints-{run_id}", daemon=True)
        self._syncer = threading.Thread(target=self._sync_loop, name=f"checkpoint-sync-{run_id}", daemon=True)
        self._thread.start()
        self._syncer.start()

    def new_failures(self) -> list[tuple[int, str]]:
        """The checkpoints the disk refused since the last call, (step, why) each."""
        told, self._told = self._told, len(self.failures)
        return self.failures[told : self._told]

    def submit(self, state: dict[str, Any]) -> None:
        if self.error is not None:
            raise RuntimeError(f"writing a checkpoint failed: {self.error}") from self.error
        self._submitted += 1
        self._queue.put((state["loop"]["step"], snapshot.take(state)))  # the training thread's cost

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            t0 = time.thread_time()
            path = checkpoints.path_for(self.root, self.run_id, item[0])
            written = False
            try:
                checkpoints.write(path, serialize(item[1]), durable=False)
                written = True
                checkpoints.prune(self.root, self.run_id, self.cap_bytes)
            except OSError as exc:  # a full or failing disk: the run trains on, without this checkpoint
                self.failures.append((item[0], f"{exc.strerror or exc}"))
            except BaseException as exc:  # noqa: BLE001 - reported by the next submit or close
                self.error = exc
            self.cpu_s += time.thread_time() - t0
            with self._placed_cond:
                self._placed += 1
                self._placed_cond.notify_all()
            if self.error is None and written:
                self._to_sync.put(path)
        self._to_sync.put(None)

    def _sync_loop(self) -> None:
        while (path := self._to_sync.get()) is not None:
            try:
                checkpoints.sync(path)
            except FileNotFoundError:
                pass  # retention took it already
            except OSError as exc:
                log.warning("checkpoint %s is in place but not flushed to disk: %s", path, exc)

    def close(self) -> None:
        with self._placed_cond:
            self._placed_cond.wait_for(lambda: self._placed >= self._submitted)
        self._queue.put(None)  # the threads end, the syncer after the last fsync
        if self.error is not None:
            raise RuntimeError(f"writing a checkpoint failed: {self.error}") from self.error


def load(root: Path, run_id: str, step: int) -> dict[str, Any]:
    """A checkpoint's state; CheckpointError (naming the file) when it is missing, torn or corrupt."""
    body = checkpoints.read(checkpoints.path_for(root, run_id, step))
    state = snapshot.decode(body)
    if state.get("format") != FORMAT:
        raise checkpoints.CheckpointError(
            f"Checkpoint {checkpoints.path_for(root, run_id, step)} has format {state.get('format')}; "
            f"this engine reads format {FORMAT}."
        )
    return state


def restore_rngs(state: dict[str, Any], prober) -> None:
    """Every generator as it was at the checkpoint (torch, CUDA, numpy, Python, the probes')."""
    _set_rng_state(state["rng"])
    if prober is not None and state["probes"] is not None:
        prober.load_rng_state(state["probes"])
