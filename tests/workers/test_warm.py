"""The warm worker parent: a child forked from it trains at once, exactly as a fresh process would,
and the warm-up never touches CUDA (a child forked after that could not use the GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from normlab.settings import Settings
from normlab.store import get_store
from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers import warm

CHILD = textwrap.dedent("""
    import json, os, sys
    import workers.jobs  # what the Celery worker's parent imports
    from normlab.settings import Settings
    from normlab_client.spec import RunSpec
    from workers.engine import train
    from workers.warm import warm_parent

    settings = Settings(data_dir=sys.argv[2])
    if sys.argv[1] == "warm":
        assert warm_parent(settings)["failed"] == []

    def one_run():
        before = set(sys.modules)
        spec = RunSpec(task="digits", norm="layer", batch_size=4, steps=60)
        res = train(spec, emit=lambda ev: None, settings=settings)
        imported = sorted(set(sys.modules) - before)  # what the run had to load on its way
        print(json.dumps({"imported": imported, "status": res.status, "metrics": res.metrics}))

    if sys.argv[1] == "warm":  # as the prefork pool does: a child per run
        pid = os.fork()
        if pid == 0:
            one_run()
            os._exit(0)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    else:
        one_run()
""")


def _run(mode: str, tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # torch's own thread count
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_child_of_the_warm_parent_trains_at_once_and_like_a_fresh_process(tmp_path):
    fresh, forked = _run("fresh", tmp_path), _run("warm", tmp_path)
    assert forked["status"] == fresh["status"] == "completed"
    assert forked["metrics"] == fresh["metrics"]  # bit for bit: the warm-up leaves no state behind
    # A fresh process pays torch's lazy start-up on its first run (torch._dynamo on the first Adam, and
    # more: seconds); the warm parent paid all of it, so its child loads nothing and starts at once.
    # (How soon the first point comes is `normlab bench demo`'s measure, not a test's.)
    assert "torch._dynamo" in fresh["imported"], fresh["imported"][:20]
    assert forked["imported"] == [], forked["imported"]


def test_warm_specs_cover_every_task_normalizer_and_cell():
    specs = warm.warm_specs(Settings(data_dir="/nonexistent"))
    assert {s.task for s in specs} == {t for t, info in TASKS.items() if not info.needs_files}
    assert {s.norm for s in specs} == {n for info in TASKS.values() for n in info.norms}
    assert {s.cell for s in specs if s.cell} == {"lstm", "gru", "tanh"}
    assert any(s.probes.enabled for s in specs) and {s.optimizer for s in specs} == {"adam", "sgd"}
    assert all(s.device == "cpu" for s in specs)


def test_the_warm_up_never_touches_cuda(tmp_path, monkeypatch):
    def touched(*_a, **_k):
        raise AssertionError("the warm-up touched CUDA")

    for name in (
        "is_available",
        "device_count",
        "init",
        "_lazy_init",
        "get_device_name",
        "get_device_properties",
        "synchronize",
    ):
        monkeypatch.setattr(torch.cuda, name, touched)
    threads = torch.get_num_threads()
    report = warm.warm_parent(Settings(data_dir=tmp_path))
    assert report["failed"] == [] and report["runs"] >= 20
    assert not torch.cuda.is_initialized()
    assert torch.get_num_threads() == threads  # the one-thread warm-up gives the threads back


@pytest.mark.parametrize(
    "pool, prefork", [("prefork", True), ("processes", True), ("solo", False), ("threads", False)]
)
def test_only_a_forking_pool_is_warmed(pool, prefork):
    from celery.concurrency import get_implementation

    assert warm.is_prefork(pool) is prefork
    assert warm.is_prefork(get_implementation(pool)) is prefork


class _Trained:
    """A stand-in for the engine's train: records the warm-up pieces in the order they were trained."""

    def __init__(self):
        self.specs = []

    def __call__(self, spec, settings):
        self.specs.append(spec)
        return type("Result", (), {"status": "completed", "error": None})()


def test_a_run_queued_during_the_warm_up_cuts_it_to_that_runs_pieces(tmp_path):
    settings = Settings(data_dir=tmp_path)
    pieces = warm.warm_specs(settings)
    waiting = RunSpec(task="adding", norm="layer", cell="lstm")
    asked = []

    def queued():
        asked.append(len(trained.specs))
        return [waiting] if len(trained.specs) >= 3 else []  # queued while the third piece trained

    trained = _Trained()
    report = warm.warm_parent(settings, queued, train=trained)
    rest = [p for p in pieces[3:] if p.task == "adding"]
    assert trained.specs == pieces[:3] + rest  # the run's own pieces, then the worker serves
    assert len(rest) >= 5 and report["skipped"] == len(pieces) - 3 - len(rest) > 10
    assert asked == [1, 2, 3]  # between pieces, and no more once cut


def test_without_a_queued_run_the_warm_up_is_whole(tmp_path):
    settings = Settings(data_dir=tmp_path)
    trained = _Trained()
    report = warm.warm_parent(settings, list, train=trained)
    assert trained.specs == warm.warm_specs(settings) and report["skipped"] == 0


def test_a_run_queued_before_the_worker_starts_waits_only_for_the_core(tmp_path, monkeypatch):
    """The Celery worker's own warm-up hook, with a run already in the store's queue: after the first
    piece (torch, the engine, Adam) only the run's task is warmed."""
    from workers import engine, jobs
    from workers.celery_app import create_app

    settings = Settings(data_dir=tmp_path)
    store = get_store(settings)
    store.create_runs([{"id": "first", "spec": {"task": "mnist1d", "norm": "batch"}}])
    trained = _Trained()
    monkeypatch.setattr(engine, "train", trained)
    sender = type("Worker", (), {"pool_cls": "prefork", "app": create_app(settings)})()
    jobs._warm_parent(sender)
    pieces = warm.warm_specs(settings)
    assert trained.specs == [pieces[0]] + [p for p in pieces[1:] if p.task == "mnist1d"]
    assert len(trained.specs) < len(pieces) / 4


def test_a_second_worker_warms_whole_once_the_first_cut_its_warm_up_for_the_one_queued_run(
    tmp_path, monkeypatch
):
    from workers import engine, jobs
    from workers.celery_app import create_app

    settings = Settings(data_dir=tmp_path)
    get_store(settings).create_runs([{"id": "first", "spec": {"task": "mnist1d", "norm": "batch"}}])
    sender = type("Worker", (), {"pool_cls": "prefork", "app": create_app(settings)})()
    firsts, seconds = _Trained(), _Trained()
    monkeypatch.setattr(engine, "train", firsts)
    jobs._warm_parent(sender)
    monkeypatch.setattr(engine, "train", seconds)
    jobs._warm_parent(sender)  # the second worker of the same data directory
    assert len(firsts.specs) < len(seconds.specs) == len(warm.warm_specs(settings))


def test_claim_cut_is_won_once_per_run_and_old_lots_are_cleared(tmp_path):
    assert warm.claim_cut(tmp_path, "a", now=1000.0) and not warm.claim_cut(tmp_path, "a", now=1000.0)
    assert warm.claim_cut(tmp_path, "b", now=1000.0)
    later = (tmp_path / "b").stat().st_mtime + warm.CUT_KEPT_S + 1
    assert warm.claim_cut(tmp_path, "a", now=later)  # a lot older than CUT_KEPT_S no longer counts


def test_each_worker_claims_one_queued_run_in_the_fair_order(tmp_path):
    store = get_store(Settings(data_dir=tmp_path))
    store.create_runs([{"id": "batch", "spec": {"task": "adding", "norm": "layer"}, "group_id": "g"}])
    store.create_runs(
        [
            {"id": "lab", "spec": {"task": "copy", "norm": "layer", "cell": "gru"}},
            {"id": "bad", "spec": {"task": "no-such-task", "norm": "layer"}},
        ]
    )
    folder = tmp_path / "cuts"
    claims = [warm.claim_queued(store, folder) for _ in range(4)]  # four workers, one after another
    assert [(s.task, s.cell) for s in claims[0]] == [("copy", "gru")]  # interactive first
    assert claims[1] == []  # the unreadable one: claimed, nothing to warm for
    assert [s.task for s in claims[2]] == ["adding"] and claims[3] == []


def test_with_two_runs_queued_two_workers_cut_their_warm_up_one_run_each(tmp_path, monkeypatch):
    from workers import engine, jobs
    from workers.celery_app import create_app

    settings = Settings(data_dir=tmp_path)
    get_store(settings).create_runs(
        [
            {"id": "one", "spec": {"task": "mnist1d", "norm": "batch"}},
            {"id": "two", "spec": {"task": "copy", "norm": "layer"}},
        ]
    )
    sender = type("Worker", (), {"pool_cls": "prefork", "app": create_app(settings)})()
    trained = []
    for _ in range(2):
        trained.append(_Trained())
        monkeypatch.setattr(engine, "train", trained[-1])
        jobs._warm_parent(sender)
    pieces = warm.warm_specs(settings)
    assert [{p.task for p in t.specs[1:]} for t in trained] == [{"mnist1d"}, {"copy"}]
    assert all(t.specs[0] == pieces[0] for t in trained)
