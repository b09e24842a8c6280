"""A cancel ends a run in every phase: cooperatively while it trains, by the run's own child process
(RunCloser) while it sets up or sits in one long step; either way the terminal event is written once.

How fast (the 1 s target, each phase) is measured by `normlab bench demo`, not here: a unit test on a
shared machine asserts what happens, with bounds far from the target."""

from __future__ import annotations

import json
import os
import time

from normlab.settings import Settings
from normlab.store import Store, new_run_id
from normlab_client.events import EventCounter, RunResult, RunStatus
from normlab_client.spec import RunSpec
from tests._poll import wait_for
from workers import runguard
from workers.jobs import run_training


def _queued(tmp_path) -> tuple[Settings, Store, str]:
    settings = Settings(data_dir=tmp_path)
    store = Store(settings.resolved_database_url)
    run_id = new_run_id()
    spec = RunSpec(task="digits", steps=20, hidden_size=16).resolved()
    store.create_runs([{"id": run_id, "spec": spec.model_dump(mode="json")}])
    return settings, store, run_id


def stuck_in_set_up(spec, emit, should_stop, run_id, settings, poll=None, resume=None):
    """An engine that never looks at should_stop (as one loading data or initialising CUDA)."""
    EventCounter(emit, run_id)("status", 0, {"status": RunStatus.RUNNING})
    time.sleep(60)
    raise AssertionError("not ended by the cancel")


def cooperative(spec, emit, should_stop, run_id, settings, poll=None, resume=None):
    events = EventCounter(emit, run_id)
    events("status", 0, {"status": RunStatus.RUNNING})
    step = 0
    while not should_stop():
        step += 1
        time.sleep(0.01)
    events("status", step, {"status": RunStatus.CANCELLED, "message": "engine's own", "metrics": {}})
    return RunResult(
        status=RunStatus.CANCELLED, step=step, wall_time=0.0, device="cpu", kernel_backend="torch"
    )


def _in_pool_child(run_id: str, settings: Settings, train) -> int:
    """run_training in a forked child as the prefork pool runs it; returns the child's pid."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            runguard.allow_hard_exit()
            run_training(run_id, settings, train=train)
        except BaseException:
            code = 3
        os._exit(code)
    return pid


def _cancel(store: Store, run_id: str, pid: int) -> int:
    """Cancel the run once its child has it running; the child's exit code once the run is cancelled.

    The bound is far below the stuck engine's 60 s: within it, only the child's closer can end the run."""
    wait_for(lambda: store.get_run(run_id)["status"] == RunStatus.RUNNING, 30, "the child claimed the run")
    time.sleep(0.3)  # well inside "set-up"
    store.request_cancel(run_id)
    wait_for(
        lambda: store.get_run(run_id)["status"] == RunStatus.CANCELLED, 20, "the run was cancelled", 0.01
    )
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _terminal_events(store: Store, run_id: str) -> list[dict]:
    events = store.events_after(run_id, 0)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return [
        json.loads(e.payload)
        for e in events
        if e.kind == "status" and json.loads(e.payload)["status"] != RunStatus.RUNNING
    ]


def test_a_run_stuck_in_set_up_is_cancelled_by_its_child(tmp_path):
    settings, store, run_id = _queued(tmp_path)
    pid = _in_pool_child(run_id, settings, stuck_in_set_up)
    assert _cancel(store, run_id, pid) == 0
    [end] = _terminal_events(store, run_id)
    assert end["status"] == RunStatus.CANCELLED and "setting up" in end["message"]
    run = store.get_run(run_id)
    assert run["last_seq"] == 2 and run["finished_at"] is not None
    assert json.loads(run["summary"])["step"] == 0


def test_a_cooperative_engine_ends_the_run_itself_and_only_once(tmp_path):
    settings, store, run_id = _queued(tmp_path)
    pid = _in_pool_child(run_id, settings, cooperative)
    assert _cancel(store, run_id, pid) == 0
    [end] = _terminal_events(store, run_id)
    assert end["message"] == "engine's own"  # not the forced end's


def test_close_writes_the_end_once(tmp_path):
    settings, store, run_id = _queued(tmp_path)
    store.claim(run_id)
    from normlab.feed.writer import EventWriter, RunWatch

    writer = EventWriter(store, run_id)
    watch = RunWatch(store, run_id, 2.0, writer=writer)
    closer = runguard.RunCloser(writer, watch, hard_exit=False)
    closer.engine_returned()
    watch.stop()
    finish = {"status": RunStatus.COMPLETED, "finished_at": time.time()}
    assert closer.close(dict(finish), {"status": RunStatus.COMPLETED, "time": time.time()})
    assert not closer.close(dict(finish), {"status": RunStatus.COMPLETED, "time": time.time()})
    assert len(_terminal_events(store, run_id)) == 1
