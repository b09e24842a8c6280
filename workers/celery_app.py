"""The worker's Celery app, built by `create_app(settings)` at worker start (never at import).

`celery -A workers.celery_app worker` also works: the module attribute `app` is built on first access
from the environment's settings. The configuration itself is shared with the API (normlab.queue).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from celery import Celery, bootsteps
from celery.worker import state

from normlab.queue import make_celery
from normlab.settings import Settings
from normlab_client.norms import load_plugins, registered

JOB_MODULES = ["workers.jobs"]
_app: Celery | None = None
log = logging.getLogger(__name__)


class NothingHeldWhileBusy(bootsteps.StartStopStep):
    """A worker training a run holds no second message, also after its broker connection was lost.

    Celery counts the messages a worker holds per connection: when the connection to Redis comes back
    while a run trains, that run's message belonged to the lost connection, so the consumer would take
    one more message and keep it, unstarted, until the run ends, while a free worker waits for it. A
    consumer that (re)starts while a run is in progress therefore consumes nothing until the run ends."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self._timer: Any = None

    def start(self, c: Any) -> None:
        if not _busy():
            return
        names = [q.name for q in c.task_consumer.queues]
        for name in names:
            c.task_consumer.cancel_by_queue(name)
        log.warning("broker connection restored while a run trains: taking no message until it ends")

        def resume() -> None:
            if _busy():
                return
            self._timer.cancel()
            self._timer = None
            for name in names:
                c.add_task_queue(name)
            log.warning("the run in progress ended: taking messages again")

        self._timer = c.timer.call_repeatedly(0.2, resume)

    def stop(self, c: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _busy() -> bool:
    """Whether this worker holds a run it has not finished (training it, or about to)."""
    return bool(state.active_requests or state.reserved_requests)


def create_app(settings: Settings) -> Celery:
    """The worker's app for `settings`; its tasks read the same settings from `app.normlab_settings`."""
    if load_plugins(settings.plugins):  # normalizers of the user's own, before any run is taken
        write_registered_rows(settings.data_dir)
    app = make_celery(settings, include=JOB_MODULES)
    app.steps["consumer"].add(NothingHeldWhileBusy)
    app.normlab_settings = settings  # type: ignore[attr-defined]
    return app


def write_registered_rows(data_dir: Path) -> None:
    """Measure Table 1's rows of the registered normalizers (milliseconds) for the API to serve; written
    whole then renamed, so the API never reads half a file while another worker writes it."""
    from normlab.table1 import REGISTERED_FILE
    from workers.engine.invariance import registered_rows

    rows = registered_rows(sorted(registered()))
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = data_dir / f"{REGISTERED_FILE}.{os.getpid()}"
    tmp.write_text(rows.model_dump_json())
    tmp.replace(data_dir / REGISTERED_FILE)


def settings_of(app: Celery) -> Settings:
    """The settings an app was created with (see create_app)."""
    return app.normlab_settings  # type: ignore[attr-defined, no-any-return]


def __getattr__(name: str) -> Celery:
    """`app` for `celery -A workers.celery_app`: built once, on first access, from NORMLAB_*."""
    global _app
    if name != "app":
        raise AttributeError(name)
    if _app is None:
        from normlab.settings import Settings

        _app = create_app(Settings())
    return _app
