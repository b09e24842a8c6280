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
from normlab.queue import TRAIN_JOB, enqueue_run
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
    """In the prefork pool's parent, before it forks the first child: see workers/warm.py (a run
    queued meanwhile cuts the warm-up short to what it needs)."""
    if warm.is_prefork(sender.pool_cls):
        settings = settings_of(sender.app)
        store = get_store(settings)

        def queued() -> list[RunSpec]:
            """The queued run this worker cuts its warm-up for (one worker per run: warm.claim_queued)."""
            try:
                return warm.claim_queued(store, settings.data_dir / "cuts")
            except Exception as exc:  # the database is away: warm on, as before
                log.warning("warm-up: could not look at the queue (%s)", exc)
                return []

        try:
            # logged once the worker's logging is set up (_ready): worker_init comes before it
            sender.app.normlab_warm_report = warm.warm_parent(settings, queued)
        finally:
            store.dispose()  # children must not share the parent's connections


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
    report = getattr(sender.app, "normlab_warm_report", None)
    if report is not None:
        log.info(warm.summary(report))
    warm.report_ready(sender.app)  # `normlab up` prints its URL once every worker got here


class ClaimableOnly(Request):
    """A training request that is dropped in the worker's main process, before a pool child is forked
    for it, when no run is queued any more (its own cancelled, deleted or trained already, and no other
    waiting): with one fresh child per run, N stale messages would otherwise cost N forks while the runs
    behind them wait. While another run is queued the message trains that one: the worker claims the
    first in the fair order whichever run a message names (run_training), so the message of a run that
    overtook another is the one left for the run it overtook."""

    def revoked(self) -> bool:
        if super().revoked():
            return True
        run_id = str(self.args[0]) if self.args else ""
        try:
            store = get_store(settings_of(self._app))
            run = store.get_run(run_id)
            if run is not None and run["status"] == RunStatus.QUEUED or store.queue_rows()[0]:
                return False
        except Exception as exc:  # the database is away: the child's claim decides, as before
            log.warning("run %s: could not look at its status before starting (%s)", run_id, exc)
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
    last = store.events_after(run["id"], seq - 1, limit=1)
    yielded = bool(last) and last[0].kind == "status" and json.loads(last[0].payload)["status"] == "queued"
    reported = lineage.last_scalars_step(store, run["id"])
    step = checkpoints.at_or_before(settings.checkpoint_root, run["id"], reported)
    if step is None:
        raise checkpoints.CheckpointError(
            f"Run {run['id']} has stored events but no checkpoint at or before step {reported} to "
            "resume from."
        )
    return Resume(step=step, seq=seq, reported=reported, yielded=yielded)


def _requeue(settings: Settings, closer: runguard.RunCloser, run_id: str, result: RunResult) -> None:
    """A run that yielded its worker to an interactive run: its events are stored, a `queued` status
    closes this part (not terminal: its stream goes on when it resumes), and its message goes back to
    the broker, so any free worker continues it from its checkpoint (the fair order puts it after the
    interactive run it yielded to)."""
    closer.close(
        {"status": RunStatus.QUEUED, "worker_host": None},
        {
            "status": RunStatus.QUEUED,
            "message": f"Yielded its worker after step {result.step}; queued to continue from there.",
            "metrics": result.metrics,
            "step": result.step,
            "time": time.time(),
        },
    )
    enqueue_run(settings, run_id)


def _check_parent(store, settings: Settings, spec: RunSpec) -> None:
    """A fork whose parent's checkpoint is gone fails saying why: its parent run was deleted (the
    checkpoints go with it), rather than the loader's guess."""
    parent = spec.parent
    if parent is None or checkpoints.path_for(settings.checkpoint_root, parent.id, parent.step).exists():
        return
    if store.get_run(parent.id) is None:
        raise checkpoints.CheckpointError(
            f"This fork's parent run {parent.id} was deleted, and its checkpoints with it; the fork cannot "
            f"start from step {parent.step}. Fork another run, or resubmit it without a parent."
        )


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
        if not run[
            "last_seq"
        ]:  # a fresh fork starts from its parent's checkpoint, a resumed one from its own
            _check_parent(store, settings, spec)
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
    if result.status == RunStatus.QUEUED and not watch.should_stop():
        _requeue(settings, closer, run_id, result)
        if publisher is not None:
            publisher.close()
        return result.status
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
