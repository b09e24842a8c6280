"""The Celery side: configuration for long GPU runs, and a real worker (start_worker, not eager mode)
training a stored run through the embedded filesystem broker with the real engine."""

from __future__ import annotations

import json
import time
import uuid

from celery.contrib.testing.worker import start_worker

from normlab.queue import TRAIN_JOB, make_celery
from normlab.settings import Settings
from normlab.store import Store, new_run_id
from normlab_client.spec import RunSpec
from workers.celery_app import create_app


def test_config_for_long_single_runs():
    conf = make_celery(Settings(broker_url="redis://127.0.0.1:6379/9", max_run_seconds=7200)).conf
    assert conf.worker_concurrency == 1 and conf.worker_prefetch_multiplier == 1
    assert conf.worker_max_tasks_per_child == 1  # a fresh process per run releases CUDA memory
    # Acked when the run ends, so prefetch 1 holds only the run being trained (a free worker takes the
    # next); a killed worker's run is reported lost (not redelivered; the claim skips it anyway).
    assert conf.task_acks_late is True and conf.task_reject_on_worker_lost is False
    assert conf.broker_transport_options["visibility_timeout"] > 7200
    assert conf.task_soft_time_limit == 7200 < conf.task_time_limit
    assert conf.task_ignore_result


def test_task_is_registered_under_its_name():
    import workers.jobs  # noqa: F401  (imports the engine, as the worker's parent does)

    assert TRAIN_JOB in create_app(Settings()).tasks


def test_real_worker_trains_a_queued_run(tmp_path):
    """workers.jobs.train_run itself, in a real worker thread, configured like a `normlab worker`
    process is: from settings given at worker start (here a temporary data dir and queue)."""
    import workers.jobs  # noqa: F401

    settings = Settings(data_dir=tmp_path, queue=f"nlw-{uuid.uuid4().hex[:6]}")
    _train_one(settings, create_app(settings))


def _train_one(settings, app) -> None:
    store = Store(settings.resolved_database_url)
    run_id = new_run_id()
    spec = RunSpec(task="digits", steps=20, hidden_size=16, eval_every=10).resolved()
    store.create_runs([{"id": run_id, "spec": spec.model_dump(mode="json")}])
    with start_worker(
        app, pool="solo", perform_ping_check=False, queues=[settings.queue], shutdown_timeout=30
    ):
        app.send_task(TRAIN_JOB, args=[run_id], queue=settings.queue)
        deadline = time.monotonic() + 120
        while store.get_run(run_id)["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, "the worker did not finish the run"
            time.sleep(0.1)
    run = store.get_run(run_id)
    assert run["status"] == "completed", run["error"]
    events = store.events_after(run_id, 0)
    assert [e.seq for e in events] == list(range(1, run["last_seq"] + 1))
    assert json.loads(events[-1].payload)["status"] == "completed"
    assert run["scalars_count"] == sum(e.kind == "scalars" for e in events) > 0
    assert json.loads(run["summary"])["step"] == 20 and run["device"] == "cpu"
    store.dispose()
