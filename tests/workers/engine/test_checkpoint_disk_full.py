"""A checkpoint disk that refuses writes (full: ENOSPC, injected through the writer's seam, no root
needed) degrades a run, never kills it: the run trains to its end, says which checkpoints it lacks, and
keeps the ones written before; partial files a killed writer leaves are swept and counted."""

from __future__ import annotations

import errno
import os
import time

import pytest

from normlab import checkpoints
from normlab.settings import Settings
from normlab_client.spec import RunSpec
from workers.engine import train
from workers.engine.checkpoint import Writer

REAL_WRITE = checkpoints.write


def full_disk_from(step: int):
    """checkpoints.write as on a disk that fills up before the checkpoint of `step`."""

    def write(path, body, durable=True):
        if int(path.name.split("-")[1].split(".")[0]) >= step:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return REAL_WRITE(path, body, durable)

    return write


@pytest.fixture
def ck_settings(engine_data_dir, tmp_path) -> Settings:
    return Settings(data_dir=engine_data_dir, checkpoint_dir=tmp_path / "ck", kernel_backend="torch")


def test_the_writer_skips_a_checkpoint_the_disk_refuses(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "write", full_disk_from(2))
    writer = Writer(tmp_path, "r", cap_bytes=2**30)
    for step in (1, 2, 3):
        writer.submit({"loop": {"step": step}, "x": [step]})
    writer.close()  # no exception: the run goes on
    assert writer.error is None
    assert [(s, "No space left on device" in why) for s, why in writer.new_failures()] == [
        (2, True),
        (3, True),
    ]
    assert writer.new_failures() == []  # each told once
    assert checkpoints.steps(tmp_path, "r") == [1] and checkpoints.temporaries(tmp_path, "r") == []


def test_a_run_whose_checkpoints_cannot_be_written_trains_on_and_says_so(ck_settings, monkeypatch):
    monkeypatch.setattr(checkpoints, "write", full_disk_from(8))
    spec = RunSpec(task="digits", hidden_size=16, steps=12, eval_every=5, checkpoint_every=4, device="cpu")
    events: list = []
    result = train(spec, events.append, settings=ck_settings, run_id="full")
    assert result.status == "completed", result.error
    assert [e.step for e in events if e.kind == "scalars"][-1] == 12
    said = [e.payload for e in events if e.kind == "log" and "checkpoint_failed" in e.payload]
    assert [p["checkpoint_failed"]["step"] for p in said] == [8, 12]
    assert all(p["level"] == "warning" and "could not be written" in p["message"] for p in said)
    assert checkpoints.steps(ck_settings.checkpoint_root, "full") == [0, 4]  # the first step and every 4th


def test_stale_partial_files_are_counted_then_swept(tmp_path):
    root = tmp_path
    checkpoints.write(checkpoints.path_for(root, "r", 4), b"state" * 100, durable=False)
    stale = checkpoints.run_dir(root, "r") / ".tmp-killed.ckpt"
    stale.write_bytes(b"x" * 1000)
    fresh = checkpoints.run_dir(root, "r") / ".tmp-writing.ckpt"
    fresh.write_bytes(b"y" * 10)
    whole = checkpoints.path_for(root, "r", 4).stat().st_size
    assert checkpoints.total_bytes(root, "r") == whole + 1010  # partial files take space: counted
    old = time.time() - checkpoints.STALE_TMP_S - 60
    os.utime(stale, (old, old))
    assert checkpoints.sweep_all(root) == (1, 1000)
    assert not stale.exists() and fresh.exists()  # a writer may still be writing the fresh one
    os.utime(fresh, (old, old))
    checkpoints.prune(root, "r", cap_bytes=2**30)  # retention sweeps too
    assert checkpoints.temporaries(root, "r") == [] and checkpoints.steps(root, "r") == [4]
