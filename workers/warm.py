"""A warm worker parent: pay torch's lazy start-up once, before the pool forks a child per run.

A fresh process pays seconds before its first training step: the first `torch.optim.Adam(...)` imports
torch._dynamo (most of the time from click to first point in a cold process), the
first pass through each model builder, normalizer and cell imports and initialises its code (weight
norm's parametrizations, the probes, the native LSTM step built with `cc`), and each
task's data is loaded. `warm_parent(settings)` does all of that once in the Celery worker's parent by
training a few tiny runs of every task, normalizer and cell (2 steps each, evaluation included, events
dropped); every child the prefork pool forks for a run (one per run: worker_max_tasks_per_child=1)
inherits it, so a run's set-up takes milliseconds. The tasks' data stay cached in the parent (their
loaders keep them in lru_caches), so children read them from memory shared copy-on-write.

Two rules make forking safe:
- CUDA is never touched here (the warm-up runs on CPU with kernel_backend='torch', so not even
  `torch.cuda.is_available()` is called: that alone initialises the driver, and a child forked after
  it cannot use the GPU). CUDA workers thus still get a fresh CUDA context in each run's child.
- The warm-up runs with one CPU thread: libgomp (torch's OpenMP) does not survive fork, and a child
  forked after the parent ran an OpenMP team of 2 threads hangs in its first parallel op.

A run queued while the worker warms does not wait for the whole warm-up (seconds per worker, more on a
loaded host): the tiny runs are pieces, the first of them the core every run needs (torch, the engine,
Adam's import of torch._dynamo, a digits run), and between pieces the worker looks at the queue. Once a
run is queued it warms only the pieces that run's task (and its probes) go through, then starts
consuming; the pieces it skipped are paid by each later run of those kinds in its own child (the rest
of the warm-up cannot be finished later in this process: once the pool runs, a child may be forked from
another thread while the parent trains, which fork does not survive). So that only one worker per
queued run cuts its warm-up (the others warm whole), the workers sharing a data directory draw lots:
the first to create the run's file in `cuts/` cuts for it (`claim_queued`), and for no other run.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from normlab import fair_queue
from normlab.settings import Settings
from normlab.store import Store
from normlab_client.catalog import TASKS, task_availability
from normlab_client.spec import RunSpec

log = logging.getLogger(__name__)


def warm_specs(settings: Settings) -> list[RunSpec]:
    """Tiny CPU runs covering every task (whose data is here), normalizer, recurrent cell, optimizer
    and the probes: the code paths a run's set-up and first steps go through. (Not their product:
    each piece once is enough, and every run here lengthens the worker's start.)"""
    base = {"steps": 2, "eval_every": 1, "batch_size": 4, "device": "cpu", "hidden_size": 8, "layers": 1}
    specs: list[RunSpec] = []
    for name, task in TASKS.items():
        if not task_availability(name, settings.data_dir).available:
            continue
        seq: dict[str, int] = {}
        if task.kind == "sequence":
            lo, hi = task.seq_len_range or (1, 8)
            if lo != hi:  # a fixed length is the task's own; a spec may not name it
                seq["seq_len"] = max(lo, min(task.seq_len or 8, 8, hi))
        if task.eval_longer and "seq_len" in seq:
            seq["eval_seq_len"] = seq["seq_len"]
        first_cell = task.cells[0] if task.cells else None
        norms = task.norms if name in ("digits", "conv-digits", "adding") else ("layer",)
        for cell in task.cells if name == "adding" else (first_cell,):  # each cell once, on one task
            for norm in norms if cell == first_cell else ("layer",):
                specs.append(RunSpec(task=name, norm=norm, cell=cell, **base, **seq))
    specs.append(RunSpec(task="digits", norm="layer", optimizer="sgd", **base))
    specs.append(
        RunSpec(
            task="digits", norm="layer", **base, probes={"enabled": True, "trace_every": 1, "fisher_every": 1}
        )
    )
    return specs


def serves(piece: RunSpec, waiting: Sequence[RunSpec]) -> bool:
    """Whether the warm-up piece goes through code a waiting run needs: its task, or the probes."""
    return any(piece.task == run.task or (piece.probes.enabled and run.probes.enabled) for run in waiting)


CUT_KEPT_S = 600.0  # a lot drawn this long ago is cleared (a later start draws again)


def claim_queued(store: Store, folder: Path) -> list[RunSpec]:
    """The spec of the first queued run (in the fair order) that no other worker sharing `folder` cut
    its warm-up for, now claimed by this one (`claim_cut`); [] when there is none. One run per worker:
    with two runs queued, two workers cut theirs. (A run whose stored spec no longer reads is claimed
    and not warmed for.)"""
    queued, running = store.queue_rows()
    for run_id in fair_queue.order(queued, running):
        if not claim_cut(folder, run_id):
            continue
        run = store.get_run(run_id)
        try:
            return [RunSpec.model_validate(json.loads(run["spec"]))] if run is not None else []
        except ValueError:
            return []
    return []


def claim_cut(folder: Path, run_id: str, now: float | None = None) -> bool:
    """Whether this worker cuts its warm-up short for the queued run `run_id`: True for the first of the
    workers sharing `folder` to ask (it creates the run's file there), False for the others."""
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time() if now is None else now
    for old in folder.iterdir():
        try:
            if now - old.stat().st_mtime > CUT_KEPT_S:
                old.unlink()
        except OSError:  # another worker cleared it first
            pass
    try:
        os.close(os.open(folder / run_id, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def warm_parent(
    settings: Settings, queued: Callable[[], list[RunSpec]] = list, train: Callable | None = None
) -> dict:
    """Warm this process as described above; returns {"seconds", "runs", "failed": [spec JSON, …],
    "trained": [spec, …] in order, "skipped": the pieces left out because a run was queued}.

    `queued()` is asked after each piece (the specs of the queued runs it cuts for; see workers/jobs.py):
    once it names any, only the pieces that serve them are trained, then the warm-up ends. A failed
    warm-up run is logged and skipped (the worker still serves; that run's kind just starts cold). Runs
    with one torch thread and restores the thread count after. `train`: the engine's (a test passes
    its own)."""
    import torch

    if train is None:
        from workers.engine import train as engine_train

        train = engine_train

    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cpu_only = settings.model_copy(update={"kernel_backend": "torch", "cuda_graphs": False})
    failed = []
    specs = warm_specs(settings)
    plan, trained, skipped, cut = list(specs), [], 0, False
    try:
        while plan:
            spec = plan.pop(0)
            trained.append(spec)
            result = train(spec, settings=cpu_only)
            if result.status != "completed":
                failed.append(spec.model_dump_json(exclude_defaults=True))
                log.warning(
                    "warm-up run %s ended %s: %s",
                    spec.model_dump(exclude_defaults=True),
                    result.status,
                    result.error,
                )
            if plan and not cut and (waiting := queued()):
                needed = [piece for piece in plan if serves(piece, waiting)]
                skipped, plan, cut = len(plan) - len(needed), needed, True
    finally:
        torch.set_num_threads(threads)
    report = {
        "seconds": time.perf_counter() - started,
        "runs": len(trained),
        "failed": failed,
        "trained": trained,
        "skipped": skipped,
    }
    log.info(summary(report))
    return report


def summary(report: dict) -> str:
    """The warm-up's outcome in one line (the worker logs it once its logging is set up)."""
    return (
        f"worker warmed in {report['seconds']:.1f} s ({report['runs']} tiny runs, {len(report['failed'])} "
        f"failed, {report['skipped']} skipped" + (": a run was queued)" if report["skipped"] else ")")
    )


def is_prefork(pool_cls) -> bool:
    """Whether the worker's pool forks its children (celery's 'prefork' / 'processes'): only then is
    warming the parent worth its seconds (the tests' solo and thread pools run tasks in the parent)."""
    name = pool_cls if isinstance(pool_cls, str) else f"{pool_cls.__module__}.{pool_cls.__qualname__}"
    return "prefork" in name or name == "processes"


def report_ready(app) -> None:
    """Tell whoever started this worker that it is warm and consuming: one byte on the pipe `normlab up`
    passed as --ready-fd (the app's `normlab_ready_fd`), then close it. No pipe, nothing to do."""
    fd = getattr(app, "normlab_ready_fd", None)
    if fd is None:
        return
    app.normlab_ready_fd = None
    try:
        os.write(fd, b"1")
        os.close(fd)
    except OSError as exc:  # `up` went away meanwhile: nothing to tell
        log.warning("could not report readiness on fd %s: %s", fd, exc)


def close_inherited_ready_fd(app) -> None:
    """In a pool child: close the copy of the readiness pipe it inherited, so that only the parent
    holds it (a parent that dies before it is ready then reads as end-of-file on `up`'s side)."""
    fd = getattr(app, "normlab_ready_fd", None)
    if fd is not None:
        app.normlab_ready_fd = None
        try:
            os.close(fd)
        except OSError:
            pass
