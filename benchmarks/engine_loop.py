"""`measure_loop_overhead(...)`: the engine's training loop against a plain loop over the same model.

Both train the same task's default model (same spec, seed, data batches, optimizer, thread count) for
the same steps. The engine runs `workers.engine.train` (validation, NaN check, cancel check, probes
hook points, scalars events with the gradient norm, pydantic payloads); the plain loop is what a user
would write: next batch, forward, loss, zero_grad, backward, optimizer step. The two alternate step by
step in one thread: each engine step ends in its scalars event (one per step for runs of ≤ 400 steps,
so the event's own cost is counted), which then runs one plain step. Times are this thread's CPU time
(wall time with more than one thread), medians after warm-up, over `repeats` runs; the ratio is of the
medians of the runs' medians. On a shared machine the alternation matters: run one after the other, the
two loops' medians moved by ±25 % between runs.
"""

from __future__ import annotations

import statistics
import time

import torch

from normlab.settings import Settings
from normlab_client.spec import RunSpec

TARGET_RATIO = 1.10
# The clock of a step: this thread's CPU time when torch runs on one thread (time spent descheduled on a
# shared machine then does not count), else wall time (set by measure_loop_overhead).
_clock = time.thread_time


def _plain_loop(spec: RunSpec, settings: Settings):
    """The plain loop over its own copy of the model (same seed, data batches and optimizer): one step per
    `next()`."""
    from workers.engine.loop_setup import build_model, make_optimizer, seed_everything
    from workers.engine.options import EngineOptions
    from workers.engine.tasks import load_task
    from workers.engine.tasks.base import seeded

    data = load_task(spec, settings)
    seed_everything(spec.seed)
    model = build_model(spec, data, EngineOptions.from_settings(settings))
    optimizer = make_optimizer(spec, model)
    batches = data.train_batches(spec.batch_size, seeded(spec.seed, 4))
    model.train()
    while True:
        x, y = next(batches)
        loss = data.loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        yield


def _interleaved_step_times(spec: RunSpec, settings: Settings) -> tuple[list[float], list[float]]:
    """(engine step times, plain step times), one plain step run right after each engine step (inside the
    engine's scalars event), so both see the same machine at the same moment."""
    from workers.engine import train

    plain = _plain_loop(spec, settings)
    engine_times: list[float] = []
    plain_times: list[float] = []
    last: list[float] = []

    def emit(event) -> None:
        if event.kind != "scalars":
            return
        ended = _clock()  # the engine's step (and its event) ended
        if last:
            engine_times.append(ended - last[0])
        next(plain)
        last[:] = [_clock()]
        plain_times.append(last[0] - ended)

    result = train(spec, emit, settings=settings)
    if result.status != "completed":
        raise RuntimeError(f"the engine's run ended {result.status}: {result.error}")
    return engine_times, plain_times[1:]  # the plain loop's first step builds its graph and state


def measure_loop_overhead(
    settings: Settings,
    task: str = "digits",
    norm: str = "layer",
    steps: int = 150,
    warmup: int = 20,
    repeats: int = 3,
    threads: int = 1,
) -> dict:
    """{"engine_ms", "plain_ms", "ratio", …}: median step times of the engine and the plain loop."""
    if min(steps, repeats, threads) < 1 or warmup < 0:
        raise ValueError("steps, repeats and threads must be ≥ 1, warmup ≥ 0")
    spec = RunSpec(
        task=task, norm=norm, steps=min(warmup + steps, 400), eval_every=100_000, device="cpu"
    ).resolved()
    global _clock
    _clock = time.thread_time if threads == 1 else time.perf_counter
    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # both sides alike (the engine respects an explicit choice)
    runs: dict[str, list[float]] = {"engine": [], "plain": []}
    try:
        for _ in range(repeats):
            engine, plain = _interleaved_step_times(spec, settings)
            runs["engine"].append(statistics.median(engine[warmup:]))
            runs["plain"].append(statistics.median(plain[warmup:]))
    finally:
        torch.set_num_threads(before)
    engine, plain = statistics.median(runs["engine"]), statistics.median(runs["plain"])
    return {
        "task": task,
        "norm": norm,
        "model": f"{spec.layers}x{spec.hidden_size}",
        "batch_size": spec.batch_size,
        "steps": spec.steps - warmup,
        "repeats": repeats,
        "threads": threads,
        "engine_ms": 1e3 * engine,
        "plain_ms": 1e3 * plain,
        "ratio": engine / plain,
        "target_ratio": TARGET_RATIO,
        "meets_target": engine / plain <= TARGET_RATIO,
        "runs_ms": {k: [round(1e3 * v, 4) for v in vs] for k, vs in runs.items()},
    }
