"""The worker's Celery app, built by `create_app(settings)` at worker start (never at import).

`celery -A workers.celery_app worker` also works: the module attribute `app` is built on first access
from the environment's settings. The configuration itself is shared with the API (normlab.queue).
"""

from __future__ import annotations

from celery import Celery

from normlab.queue import make_celery
from normlab.settings import Settings

TASK_MODULES = ["workers.tasks"]
_app: Celery | None = None


def create_app(settings: Settings) -> Celery:
    """The worker's app for `settings`; its tasks read the same settings from `app.normlab_settings`."""
    app = make_celery(settings, include=TASK_MODULES)
    app.normlab_settings = settings  # type: ignore[attr-defined]
    return app


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
