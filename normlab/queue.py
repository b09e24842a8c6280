"""Enqueueing a run: the Celery configuration both sides share, and `enqueue_run(settings, run_id)`.

The API sends the training task by name (`TRAIN_TASK`) and never imports the worker; the worker builds
its app with `make_celery(settings, include=["workers.tasks"])` (workers/celery_app.py).

Redis form: broker = settings.broker_url (e.g. redis://…). Embedded form (no broker_url): kombu's
filesystem transport under <data_dir>/queue — works across processes with nothing installed, polled
every 50 ms. Long GPU runs: one task at a time per worker process (concurrency 1, prefetch 1), acked
when it starts (a killed worker's run is reported `lost` by the heartbeat reaper, never re-run), and
a fresh child process per task so CUDA memory is released.
"""

from __future__ import annotations

from celery import Celery

from normlab.settings import Settings

TRAIN_TASK = "normlab.train_run"


def broker_options(settings: Settings) -> tuple[str, dict]:
    """(broker URL, transport options) for the configured form."""
    if settings.broker_url:
        # Only matters if acks_late is ever turned on: never redeliver a run that is still training.
        return settings.broker_url, {"visibility_timeout": settings.max_run_seconds + 600}
    folder = settings.data_dir / "queue"
    for sub in ("messages", "processed", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return "filesystem://", {
        "data_folder_in": str(folder / "messages"),
        "data_folder_out": str(folder / "messages"),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
        "store_processed": False,
        "polling_interval": 0.05,
    }


def make_celery(settings: Settings, include: list[str] | None = None) -> Celery:
    """A Celery app for `settings`: a client that sends tasks (include=None) or, with the task
    modules in `include`, the worker's app."""
    url, transport_options = broker_options(settings)
    app = Celery("normlab", broker=url, include=include or [])
    app.conf.update(
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        task_default_queue=settings.queue,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,  # outcomes live in the results store, not in Celery
        result_backend=None,
        task_acks_late=False,
        worker_prefetch_multiplier=1,
        worker_concurrency=1,
        worker_max_tasks_per_child=1,
        task_soft_time_limit=settings.max_run_seconds,
        task_time_limit=settings.max_run_seconds + 120,
        worker_send_task_events=False,
        worker_enable_remote_control=bool(settings.broker_url),  # the filesystem form has no pidbox use
        worker_hijack_root_logger=False,
    )
    return app


_clients: dict[tuple[object, ...], Celery] = {}


def celery_for(settings: Settings) -> Celery:
    """One Celery client per broker and queue (the API sends tasks by name and never imports them)."""
    key = (settings.broker_url, str(settings.data_dir), settings.queue, settings.max_run_seconds)
    if key not in _clients:
        _clients[key] = make_celery(settings)
    return _clients[key]


def enqueue_run(settings: Settings, run_id: str) -> None:
    celery_for(settings).send_task(TRAIN_TASK, args=[run_id], queue=settings.queue)

