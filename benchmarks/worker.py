"""The worker, played by a benchmark against a real store (and feed): a claimed run kept alive by its
heartbeat, events sent through the worker's own `EventWriter` at a fixed rate, and a long finished
history written in the store's batches. Used by `normlab bench stream` (and `bench faults`)."""

from __future__ import annotations

import json
import time

from normlab_client.events import RunStatus


def emit_synthetic(store, run_id: str, publisher, n_events: int, rate_hz: float) -> None:
    """Drive the worker's EventWriter: a status, n_events scalars at rate_hz, a terminal status."""
    from normlab.feed.writer import EventWriter
    from normlab_client.events import Event

    writer = EventWriter(store, run_id, publisher)
    writer.emit(Event(seq=1, step=0, kind="status", payload={"status": RunStatus.RUNNING}))
    t0 = time.monotonic()
    for i in range(n_events):
        delay = t0 + (i + 1) / rate_hz - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        writer.emit(
            Event(
                seq=i + 2,
                step=i + 1,
                kind="scalars",
                payload={
                    "train_loss": 1.0 / (i + 1),
                    "val_loss": None,
                    "accuracy": None,
                    "bpc": None,
                    "grad_norm": 1.0,
                    "lr": 1e-3,
                    "steps_per_s": rate_hz,
                    "elapsed": i / rate_hz,
                },
            )
        )
    writer.emit(
        Event(seq=n_events + 2, step=n_events, kind="status", payload={"status": RunStatus.COMPLETED})
    )
    writer.close(
        {"status": RunStatus.COMPLETED, "finished_at": time.time()},
        {"status": RunStatus.COMPLETED, "time": time.time()},
    )


def new_running_run(store):
    """A stored run claimed by this process, with a RunWatch keeping its heartbeat (as a worker does,
    or the reaper would declare it lost). Returns (run_id, watch)."""
    from normlab.feed.writer import RunWatch
    from normlab.store import new_run_id
    from normlab_client.spec import RunSpec

    run_id = new_run_id()
    # No Celery task is sent: the bench claims the run and plays the worker itself.
    spec = RunSpec(task="digits", steps=10).resolved().model_dump(mode="json")
    store.create_runs([{"id": run_id, "spec": spec}])
    store.claim(run_id, "bench")
    return run_id, RunWatch(store, run_id, heartbeat_s=1.0)


def write_history(store, n_points: int) -> tuple[str, float]:
    """A finished run with n_points scalars events, written through the store's batched path."""
    from normlab.store import EventRow
    from normlab.store.rollup import RollupBuilder, bucket_rows

    run_id, watch = new_running_run(store)
    t0 = time.perf_counter()
    builder, batch, buckets = RollupBuilder(), [], []
    t_base = time.time()
    for i in range(n_points):
        val = 1.0 / (i + 1) if i % 50 == 0 else None
        loss = 5.0 if i == n_points // 2 else 1.0 / (1 + i * 1e-4)
        payload = json.dumps(
            {"train_loss": loss, "val_loss": val, "grad_norm": 0.5, "lr": 1e-3, "elapsed": i * 1e-3},
            separators=(",", ":"),
        )
        row = EventRow(i + 1, i + 1, "scalars", t_base + i * 1e-3, payload)
        batch.append(row)
        buckets += bucket_rows(builder.add(row.seq, row.step, row.time, json.loads(payload)))
        if len(batch) == 20_000 or i == n_points - 1:
            store.append_events(run_id, batch, buckets, len(batch))
            batch, buckets = [], []
    watch.stop()
    assert store.finish_with_status(
        run_id, RunStatus.COMPLETED, "bench history", only_from=(RunStatus.RUNNING,)
    )
    return run_id, time.perf_counter() - t0
