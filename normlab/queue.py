"""Enqueueing a run: the Celery configuration both sides share, and `enqueue_run(settings, run_id)`.

The API sends the training job by name (`TRAIN_JOB`) and never imports the worker; the worker builds
its app with `make_celery(settings, include=["workers.jobs"])` (workers/celery_app.py).

Redis form: broker = settings.broker_url (e.g. redis://…). Embedded form (no broker_url): kombu's
filesystem transport under <data_dir>/queue, made atomic (normlab/queuefs.py) — works across processes
with nothing installed, polled every 50 ms. Long GPU runs: one task at a time per worker process
(concurrency 1), a fresh child process per task so CUDA memory is released, and a message acked only
when its run ends (acks_late) with prefetch 1: a worker busy training holds no second message, so a free
worker takes the next run at once instead of it waiting behind the busy one's long run. A run is trained
only by the worker that claims it in the store (queued -> running), so a message delivered twice never
runs a run twice; a killed worker's run is reported `lost` by the heartbeat reaper. A queued run whose
message nobody holds any more (its worker died after taking it) is sent again by the API
(backend/requeue.py, using `waiting_messages`). Messages are interchangeable: a worker trains the first
queued run in the fair order (normlab/fair_queue.py), whichever run its message names.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from normlab import queuefs
from normlab.settings import Settings

TRAIN_JOB = "normlab.train_run"


def broker_options(settings: Settings) -> tuple[str, dict[str, Any]]:
    """(broker URL, transport options) for the configured form."""
    if settings.broker_url:
        # With acks_late, an unacked message comes back after this long: above the longest allowed run
        # (and the claim skips it anyway).
        return settings.broker_url, {"visibility_timeout": settings.max_run_seconds + 600}
    folder = settings.data_dir / "queue"
    for sub in ("messages", "processed", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    queuefs.register()
    return f"{queuefs.SCHEME}://", {
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
        task_acks_late=True,  # see the module docstring: prefetch 1 then means "only the run I train"
        task_reject_on_worker_lost=False,  # a run whose worker was killed is `lost`, not redelivered
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
    celery_for(settings).send_task(TRAIN_JOB, args=[run_id], queue=settings.queue)


def waiting_run_ids(settings: Settings) -> set[str] | None:
    """Ids of the runs whose message waits in the broker for any free worker (not those a worker has
    taken); None when this broker cannot be looked into."""
    found = waiting_messages(settings)
    return None if found is None else set(found)


def waiting_messages(settings: Settings) -> list[str] | None:
    """The run id of every training message waiting in the broker, one entry a message (a run sent twice
    appears twice); None when this broker cannot be looked into."""
    if settings.broker_url.startswith(("redis://", "rediss://", "unix://")):
        import redis

        client = redis.Redis.from_url(settings.broker_url, socket_timeout=5, socket_connect_timeout=2)
        try:  # kombu keeps a queue as a list, one per priority step ("\x06\x16" + 3, 6, 9)
            keys = [settings.queue] + [f"{settings.queue}\x06\x16{p}" for p in (3, 6, 9)]
            raw = [m for key in keys for m in client.lrange(key, 0, -1)]
        finally:
            client.close()
    elif not settings.broker_url:
        folder = settings.data_dir / "queue" / "messages"
        raw = []
        for path in folder.glob(f"*.{settings.queue}.msg"):
            try:
                raw.append(path.read_bytes())
            except OSError:  # taken by a worker meanwhile
                continue
    else:
        return None
    return [run_id for m in raw if (run_id := _run_id_of(m)) is not None]


def drop_message(settings: Settings, run_id: str) -> int:
    """Remove the waiting message(s) of a run (cancelled while queued) from the broker; how many went.
    Best effort: a message a worker took meanwhile is dropped there instead (workers.jobs)."""
    dropped = 0
    if settings.broker_url.startswith(("redis://", "rediss://", "unix://")):
        import redis

        client = redis.Redis.from_url(settings.broker_url, socket_timeout=5, socket_connect_timeout=2)
        try:
            for key in [settings.queue] + [f"{settings.queue}\x06\x16{p}" for p in (3, 6, 9)]:
                for m in client.lrange(key, 0, -1):
                    if _run_id_of(m) == run_id:
                        dropped += int(client.lrem(key, 1, m))  # type: ignore[arg-type]  # bytes work
        finally:
            client.close()
    elif not settings.broker_url:
        for path in (settings.data_dir / "queue" / "messages").glob(f"*.{settings.queue}.msg"):
            try:
                if _run_id_of(path.read_bytes()) == run_id:
                    path.unlink()
                    dropped += 1
            except OSError:  # taken by a worker meanwhile
                continue
    return dropped


def _run_id_of(message: bytes | str) -> str | None:
    """The run id a training-task message carries (kombu's JSON envelope, Celery's message protocol 2)."""
    import base64
    import json

    try:
        envelope = json.loads(message)
        if envelope.get("headers", {}).get("task") != TRAIN_JOB:
            return None
        body = envelope["body"]
        if envelope.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return str(args[0])
    except (ValueError, KeyError, IndexError, TypeError):
        return None
