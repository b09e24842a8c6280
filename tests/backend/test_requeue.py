"""The API's orphan watch re-sends a queued run only when its message is really gone: a worker trains the
first queued run in the fair order whichever run its message names, so a run that was overtaken is still
covered by the overtaking run's message (no re-send, no "worker died" warning); a message taken by a
worker that never claimed anything is re-sent after the grace. Embedded file queue, real store."""

from __future__ import annotations

import logging

import pytest

from backend.requeue import OrphanWatch
from normlab.queue import enqueue_run, waiting_messages
from normlab.settings import Settings
from normlab.store import Store


@pytest.fixture
def queue(tmp_path):
    settings = Settings(data_dir=tmp_path, broker_url="")  # type: ignore[call-arg]
    store = Store(f"sqlite:///{tmp_path / 'runs.sqlite'}")
    yield settings, store
    store.dispose()


def _take(settings: Settings, run_id: str) -> None:
    """Do what a worker does when it takes a message from the file queue: the file goes."""
    for path in (settings.data_dir / "queue" / "messages").glob(f"*.{settings.queue}.msg"):
        if run_id in path.read_text():
            path.unlink()
            return
    raise AssertionError(f"no waiting message names {run_id}")


def _two_runs(settings: Settings, store: Store) -> None:
    store.create_runs([{"id": "preset-run", "spec": {"task": "digits", "norm": "layer"}, "group_id": "g1"}])
    store.create_runs([{"id": "lab-run", "spec": {"task": "digits", "norm": "layer"}}])
    enqueue_run(settings, "preset-run")
    enqueue_run(settings, "lab-run")


def test_an_overtaken_run_is_not_resent(queue, caplog):
    settings, store = queue
    _two_runs(settings, store)
    # A worker takes the preset run's message and, by the fair order, trains the Lab run with it.
    _take(settings, "preset-run")
    assert store.claim_next("preset-run")["id"] == "lab-run"
    assert waiting_messages(settings) == ["lab-run"]  # this message will train preset-run
    watch = OrphanWatch(store, settings, grace_s=5.0)
    with caplog.at_level(logging.WARNING, logger="backend.requeue"):
        assert watch.check(now=0.0) == []
        assert watch.check(now=60.0) == []
    assert "died" not in caplog.text
    assert waiting_messages(settings) == ["lab-run"]


def test_a_message_a_dead_worker_took_is_resent_after_the_grace(queue, caplog):
    settings, store = queue
    _two_runs(settings, store)
    _take(settings, "preset-run")
    assert store.claim_next("preset-run")["id"] == "lab-run"
    _take(settings, "lab-run")  # ... and a second worker took the last message and died before claiming
    watch = OrphanWatch(store, settings, grace_s=5.0)
    with caplog.at_level(logging.WARNING, logger="backend.requeue"):
        assert watch.check(now=0.0) == []
        assert watch.check(now=4.0) == []
        assert watch.check(now=5.5) == ["preset-run"]
    assert "1 queued, 0 message(s) waiting" in caplog.text
    assert waiting_messages(settings) == ["preset-run"]
    assert watch.check(now=7.0) == []  # the new message covers it


def test_only_as_many_runs_as_messages_are_missing_are_resent(queue):
    settings, store = queue
    spec = {"task": "digits", "norm": "layer"}
    store.create_runs([{"id": f"r{i}", "spec": spec, "group_id": "g"} for i in range(3)])
    enqueue_run(settings, "r2")  # two of three messages lost (an API crash between storing and sending)
    watch = OrphanWatch(store, settings, grace_s=1.0)
    watch.check(now=0.0)
    assert sorted(watch.check(now=2.0)) == ["r0", "r1"]
    assert sorted(waiting_messages(settings) or []) == ["r0", "r1", "r2"]
