"""A run's whole training state as a checkpoint: capture it, save it (normlab.checkpoints writes the file
atomically with its checksum), load it back.

What a run needs to continue bit for bit: the model's parameters and buffers (BatchNorm's running
statistics among them), the optimizer's state and parameter groups, every random generator it draws
from (torch's CPU and CUDA ones, numpy's, Python's, the batch stream's and the probes' own), the batch
stream's place in its epoch, the step, and the loop's open logging window.
"""

from __future__ import annotations

import io
import logging
import math
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


def serialize(state: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def save(root: Path, run_id: str, state: dict[str, Any], cap_bytes: int) -> int:
    """Write the checkpoint of step state["loop"]["step"], then apply the run's byte cap; returns its size."""
    size = checkpoints.write(checkpoints.path_for(root, run_id, state["loop"]["step"]), serialize(state))
    checkpoints.prune(root, run_id, cap_bytes)
    return size


@dataclass(frozen=True)
class Resume:
    """Where a resumed run (the same run, its worker lost) continues: from its checkpoint of `step`,
    its events numbered after `seq` (the last stored one), and nothing reported again for the steps up
    to `reported` (the last step whose events are stored: those steps are trained again, bit for bit
    on the CPU, but their events exist)."""

    step: int
    seq: int
    reported: int


class Cadence:
    """Which steps the loop checkpoints after (besides the last step and the ones a fork asks for "now").

    An explicit `checkpoint_every` is kept exactly. Left to the engine, a run is offered about ten
    checkpoints (every ceil(steps / 10) steps) and takes an offer only while its checkpoints, this one
    included (priced at the last one's cost), stay within BUDGET of the run's time so far: the cost is
    what they take from the training thread plus the writer thread's CPU time. A long run takes every
    offer; a run so fast that ten would cost more than the budget takes its first offer and fewer later
    ones (a fork then starts from the latest checkpoint before the step asked for)."""

    BUDGET = 0.02
    OFFERS = 10

    def __init__(self, every: int | None, steps: int):
        self.fixed = every is not None
        self.every = every if every is not None else max(1, math.ceil(steps / self.OFFERS))
        self.spent = 0.0  # the training thread's seconds in capturing and copying checkpoints
        self.count = 0

    def due(self, step: int, elapsed: float, writer_cpu: float) -> bool:
        """Whether to checkpoint after `step`, `elapsed` seconds into the run; `writer_cpu` is the
        writer thread's CPU time so far."""
        if step % self.every:
            return False
        if self.fixed:
            return True
        cost = self.spent + writer_cpu
        price = cost / self.count if self.count else 0.0
        return cost + price <= self.BUDGET * elapsed

    def charge(self, seconds: float) -> None:
        """A checkpoint took `seconds` of the training thread."""
        self.spent += seconds
        self.count += 1


def _copied(obj: Any) -> Any:
    """The state with every tensor copied: training goes on updating the live ones in place."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _copied(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copied(v) for v in obj]
    return obj


class Writer:
    """Writes a run's checkpoints from a thread: the training loop only copies the state's tensors (so
    training may go on), while serializing, the checksum, the write, retention and the fsyncs happen
    beside it. `close()` waits until every checkpoint is whole and in place (a run reported ended has
    its last checkpoint there for any fork), not for the fsyncs: those follow on the thread, so the
    run's end does not wait on the disk (checkpoints.write, durable=False)."""

    def __init__(self, root: Path, run_id: str, cap_bytes: int):
        self.root, self.run_id, self.cap_bytes = root, run_id, cap_bytes
        self._queue: queue.Queue[tuple[int, dict[str, Any]] | None] = queue.Queue()
        self._to_sync: queue.Queue[Path | None] = queue.Queue()
        self.error: BaseException | None = None
        self.cpu_s = 0.0  # the thread's CPU time serializing, hashing and writing
        self._submitted = self._placed = 0
        self._placed_cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name=f"checkpoints-{run_id}", daemon=True)
        self._syncer = threading.Thread(target=self._sync_loop, name=f"checkpoint-sync-{run_id}", daemon=True)
        self._thread.start()
        self._syncer.start()

    def submit(self, state: dict[str, Any]) -> None:
        if self.error is not None:
            raise RuntimeError(f"writing a checkpoint failed: {self.error}") from self.error
        self._submitted += 1
        self._queue.put((state["loop"]["step"], _copied(state)))

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            t0 = time.thread_time()
            path = checkpoints.path_for(self.root, self.run_id, item[0])
            try:
                checkpoints.write(path, serialize(item[1]), durable=False)
                checkpoints.prune(self.root, self.run_id, self.cap_bytes)
            except BaseException as exc:  # noqa: BLE001 - reported by the next submit or close
                self.error = exc
            self.cpu_s += time.thread_time() - t0
            with self._placed_cond:
                self._placed += 1
                self._placed_cond.notify_all()
            if self.error is None:
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
    state = torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)
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
