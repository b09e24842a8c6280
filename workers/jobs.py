"""The training job `train_run(run_id)` (a Celery task; a "task" in normlab is what a model learns):
load the spec, call the engine with a callback that stores and publishes events, record the outcome.
Everything else lives in the engine and the store."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import time
import traceback

from celery import current_app, shared_task
from celery.signals import worker_init, worker_process_init, worker_ready
from celery.worker.request import Request

from normlab import checkpoints
from normlab.feed.redis_feed import RedisPublisher
from normlab.feed.writer import EventWriter, RunWatch, finite
from normlab.lifeline import die_with_parent
from normlab.queue import TRAIN_JOB
from normlab.settings import Settings
from normlab.store import get_store, lineage
from normlab_client.events import TERMINAL_STATUSES, Event, RunResult, RunStatus, RunSummary
from normlab_client.spec import RunSpec
from workers import runguard, warm
from workers.celery_app import settings_of
from workers.engine import train as train_fn  # in the worker's parent: each forked child trains at once
from workers.engine.checkpoint import Resume
from workers.live_requests import LiveRequests

log = logging.getLogger(__name__)


@worker_init.connect
def _prepare_store(sender=None, **_kwargs) -> None:
    """In the worker's parent, before the pool forks: create the tables and load the database driver
    once, then drop the connections (children must not share them). Each fresh child (one per run)
    then claims its run in milliseconds instead of repeating this."""
    store = get_store(settings_of(sender.app))
    store.dispose()


@worker_init.connect
def _warm_parent(sender=None, **_kwargs) -> None:
    """In the prefork pool's parent, before it forks the first child: see workers/warm.py."""
    if warm.is_prefork(sender.pool_cls):
        warm.warm_parent(settings_of(sender.app))


@worker_process_init.connect
def _pool_child(**_kwargs) -> None:
    """In each pool child, which exists for one run (worker_max_tasks_per_child=1): die when the
    worker's main process dies (killed, or with `normlab up`) instead of training on as an orphan
    nobody can stop (the run is then reported `lost`); a cancel may end it at once."""
    die_with_parent(signal.SIGKILL)
    # The parent's pool (it looks at runs before forking, see ClaimableOnly) stays the parent's: this
    # child opens its own connections.
    get_store(settings_of(current_app)).engine.dispose(close=False)
    runguard.allow_hard_exit()
    warm.close_inherited_ready_fd(current_app)


@worker_ready.connect
def _ready(sender=None, **_kwargs) -> None:
    warm.report_ready(sender.app)  # `normlab up` prints its URL once every worker got here


class ClaimableOnly(Request):
    """A training request that is dropped in the worker's main process, before a pool child is forked
    for it, when its run is no longer queued (cancelled, deleted, trained already): with one fresh
    child per run, N stale messages would otherwise cost N forks while the runs behind them wait."""

    def revoked(self) -> bool:
        if super().revoked():
            return True
        run_id = str(self.args[0]) if self.args else ""
        try:
            run = get_store(settings_of(self._app)).get_run(run_id)
        except Exception as exc:  # the database is away: the child's claim decides, as before
            log.warning("run %s: could not look at its status before starting (%s)", run_id, exc)
            return False
        if run is not None and run["status"] == RunStatus.QUEUED:
            return False
        log.info("run %s is no longer queued (%s); message dropped", run_id, run and run["status"])
        self._announce_revoked("stale", False, None, False)  # acks it, frees the slot
        return True


@shared_task(name=TRAIN_JOB, ignore_result=True, bind=True, Request=ClaimableOnly)
def train_run(self, run_id: str) -> str | None:
    return run_training(run_id, settings_of(self.app))


def _resume_point(store, settings: Settings, run, writer: EventWriter) -> Resume | None:
    """For a run with stored events (a lost run queued again by POST /api/runs/{id}/resume): where it
    continues — its latest checkpoint that its stored history reaches, steps reported up to the last
    stored one — with the event writer following its stored events. None for a fresh run."""
    if not run["last_seq"]:
        return None
    seq = writer.continue_stored()  # first: whatever follows, its events come after the stored ones
    reported = lineage.last_scalars_step(store, run["id"])
    step = checkpoints.at_or_before(settings.checkpoint_root, run["id"], reported)
    if step is None:
        raise checkpoints.CheckpointError(
            f"Run {run['id']} has stored events but no checkpoint at or before step {reported} to "
            "resume from."
        )
    return Resume(step=step, seq=seq, reported=reported)


def run_training(run_id: str, settings: Settings, train=None) -> str | None:
    """Train one stored run to its end; return its final status (None if it was no longer queued)."""
    train = train or train_fn
    store = get_store(settings)
    # the fair order decides which queued run this message trains (normlab/fair_queue.py); the run it
    # names is taken by a later message, or trained here when it is the only one waiting
    run = store.claim_next(run_id, worker_host=f"{socket.gethostname()}:{os.getpid()}")
    if run is None:
        log.info("run %s is no longer queued (cancelled or deleted) and none waits; skipping", run_id)
        return None
    run_id = run["id"]
    publisher = RedisPublisher(settings) if settings.uses_redis_feed else None
    writer = EventWriter(store, run_id, publisher)
    watch = RunWatch(store, run_id, settings.worker_heartbeat_s, poll_s=0.1, writer=writer)
    closer = runguard.RunCloser(writer, watch)  # a cancel during set-up ends the run too
    requests = LiveRequests(store, run_id)
    started = time.time()

    def emit(event: Event) -> None:
        closer.emit(event)
        requests.keep(event)

    try:
        spec = RunSpec.model_validate_json(run["spec"])
        resume = _resume_point(store, settings, run, writer)
        result = train(
            spec,
            emit=emit,
            should_stop=watch.should_stop,
            run_id=run_id,
            settings=settings,
            poll=requests.poll,
            resume=resume,
        )
    except Exception as exc:  # the engine reports its own failures; this catches everything around it
        log.error("run %s failed outside the engine:\n%s", run_id, traceback.format_exc())
        result = RunResult(
            status=RunStatus.FAILED,
            step=0,
            wall_time=time.time() - started,
            device="unknown",
            kernel_backend="unknown",
            error=f"{type(exc).__name__}: {exc}",
        )
    finally:
        closer.engine_returned()
        watch.stop()
        requests.stop()
    if watch.should_stop() and result.status not in TERMINAL_STATUSES:
        result.status = "cancelled"
    summary = RunSummary(
        metrics=result.metrics,
        probes=result.probes,
        step=result.step,
        wall_time=result.wall_time,
        engine=result.engine,
    )
    finish = {
        "status": result.status,
        "finished_at": time.time(),
        "device": result.device,
        "kernel_backend": result.kernel_backend,
        "error": result.error,
        "summary": json.dumps(finite(summary.model_dump(mode="json"))),
    }
    closer.close(
        finish,
        {
            "status": result.status,
            "message": result.error,
            "metrics": result.metrics,
            "step": result.step,
            "time": time.time(),
        },
    )
    if publisher is not None:
        publisher.close()
    return result.status
