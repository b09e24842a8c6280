"""Checkpoint files, torch-free: where they live, atomic writing with a checksum, listing, pins, retention.

A run's checkpoints are files ``<root>/<run_id>/step-<k>.ckpt``; ``root`` is `Settings.checkpoint_root`
(the data directory in the embedded form, a directory every host mounts for a lab server). A file is
``MAGIC`` + the SHA-256 of the body in hex + newline + the body (the engine's torch serialization),
written to a temporary name, flushed to disk and renamed into place, so a reader sees a whole file or
none; a torn or altered one fails its checksum and is refused by name. A fork pins the checkpoint it
starts from (``pins/<k>``; ``pins/<k>-<holder>`` while the fork is admitted): retention never deletes a
pinned one, nor the latest.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

MAGIC = b"NORMLAB-CKPT-1\n"
STALE_TMP_S = 600.0  # a partial file untouched this long has no writer: swept by retention and gc
PER_RUN = 10  # a run left to the default cadence checkpoints every ceil(steps / PER_RUN) steps
_NAME = re.compile(r"^step-(\d+)\.ckpt$")
_PIN = re.compile(r"^(\d+)(-[0-9a-f]+)?$")  # for good, or while a fork is admitted (holder suffix)
_RUN_ID = re.compile(r"^[0-9a-f]{12}$|^[A-Za-z0-9_-]{1,64}$")


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, torn or corrupt; the message names the file."""


def run_dir(root: Path, run_id: str) -> Path:
    if not _RUN_ID.match(run_id):  # ids come from the store, but never let one climb out of root
        raise CheckpointError(f"not a run id: {run_id!r}")
    return Path(root) / run_id


def path_for(root: Path, run_id: str, step: int) -> Path:
    return run_dir(root, run_id) / f"step-{step:07d}.ckpt"


def steps(root: Path, run_id: str) -> list[int]:
    """The steps a run has checkpoints of, ascending."""
    folder = run_dir(root, run_id)
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _NAME.match(p.name)))


def at_or_before(root: Path, run_id: str, step: int) -> int | None:
    """The latest checkpointed step ≤ step, or None."""
    earlier = [s for s in steps(root, run_id) if s <= step]
    return earlier[-1] if earlier else None


def every(steps: int, checkpoint_every: int | None) -> int:
    """Steps between a run's checkpoints: `checkpoint_every` when the spec sets it, else ceil(steps /
    PER_RUN). A fork between two checkpoints replays at most this many of its parent's steps."""
    return checkpoint_every if checkpoint_every is not None else max(1, -(-steps // PER_RUN))


def schedule(steps: int, checkpoint_every: int | None, start: int = 0) -> list[int]:
    """The steps a run checkpoints after, from its spec alone (never the clock or the host's load): its
    starting step (0, or a fork's step), each multiple of `every(...)` after it, and its last step.
    A resumed run continues from one of these and does not write that one again."""
    interval = every(steps, checkpoint_every)
    first = (start // interval + 1) * interval
    return [start, *range(first, steps, interval), steps] if start < steps else [steps]


def write(path: Path, body: bytes | Sequence[bytes | memoryview], durable: bool = True) -> int:
    """Write a checkpoint atomically (temporary file, fsync, rename); returns its size in bytes. The
    body may come in parts (written one after another, hashed as one: no copy to join them).

    durable=False leaves the fsyncs to a later `sync(path)`: the file is whole and in place for every
    reader at once (a process that dies keeps what it wrote), and until `sync` a crash of the host
    may leave it torn, which its checksum then refuses by name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [body] if isinstance(body, bytes) else list(body)
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part)
    digest = hasher.hexdigest().encode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".ckpt")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + digest + b"\n")
            for part in parts:
                f.write(part)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        _sync_dir(path.parent)
    return len(MAGIC) + 65 + sum(memoryview(part).nbytes for part in parts)


def sync(path: Path) -> None:
    """Flush a checkpoint written with durable=False, and its name, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _sync_dir(path.parent)


def _sync_dir(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:  # a rename survives a crash only once the directory is on disk
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read(path: Path) -> bytes:
    """The body of a checkpoint whose checksum holds; CheckpointError naming the file otherwise."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(
            f"Checkpoint {path} does not exist (deleted with its run or by retention, or never written)."
        ) from None
    head = len(MAGIC) + 65
    if not raw.startswith(MAGIC) or len(raw) < head or raw[head - 1 : head] != b"\n":
        raise CheckpointError(f"Checkpoint {path} is not a normlab checkpoint or is torn; it was not loaded.")
    body = raw[head:]
    if hashlib.sha256(body).hexdigest().encode() != raw[len(MAGIC) : head - 1]:
        raise CheckpointError(
            f"Checkpoint {path} is corrupt (its checksum does not match); it was not loaded."
        )
    return body


def pin(root: Path, run_id: str, step: int, holder: str | None = None) -> Path:
    """Keep this checkpoint: for good (a fork starts from it), or while `holder` holds it (a fork being
    admitted: `unpin` the returned path if it is refused, so a refused fork pins nothing)."""
    folder = run_dir(root, run_id) / "pins"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (str(step) if holder is None else f"{step}-{holder}")
    path.touch()
    return path


def unpin(path: Path) -> None:
    path.unlink(missing_ok=True)


def pins(root: Path, run_id: str) -> set[int]:
    folder = run_dir(root, run_id) / "pins"
    if not folder.is_dir():
        return set()
    return {int(m.group(1)) for p in folder.iterdir() if (m := _PIN.match(p.name))}


def temporaries(root: Path, run_id: str) -> list[Path]:
    """The run's partial checkpoint files: one being written, or one a killed writer left behind."""
    folder = run_dir(root, run_id)
    return sorted(folder.glob(".tmp-*.ckpt")) if folder.is_dir() else []


def sweep(root: Path, run_id: str, older_than_s: float = STALE_TMP_S) -> tuple[int, int]:
    """Delete the run's partial checkpoint files untouched for `older_than_s` (a writer killed while
    writing: a live one touches its file all along); returns (files, bytes) deleted."""
    files = size = 0
    now = time.time()
    for tmp in temporaries(root, run_id):
        try:
            st = tmp.stat()
            if now - st.st_mtime < older_than_s:
                continue
            tmp.unlink()
        except FileNotFoundError:
            continue  # its writer renamed it into place meanwhile
        files, size = files + 1, size + st.st_size
    return files, size


def sweep_all(root: Path, older_than_s: float = STALE_TMP_S) -> tuple[int, int]:
    """`sweep` over every run under the root; (files, bytes) deleted."""
    files = size = 0
    if Path(root).is_dir():
        for folder in Path(root).iterdir():
            if folder.is_dir() and _RUN_ID.match(folder.name):
                f, b = sweep(root, folder.name, older_than_s)
                files, size = files + f, size + b
    return files, size


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # renamed into place or swept meanwhile
        return 0


def total_bytes(root: Path, run_id: str) -> int:
    """The run's checkpoints on disk, partial files included (they take space until swept)."""
    done = sum(path_for(root, run_id, s).stat().st_size for s in steps(root, run_id))
    return done + sum(_size(t) for t in temporaries(root, run_id))


def prune(root: Path, run_id: str, cap_bytes: int) -> list[int]:
    """Sweep the run's stale partial files, then delete the oldest unpinned checkpoints (never the
    latest) until the run's total (partial files counted) is ≤ cap_bytes; returns the steps deleted."""
    sweep(root, run_id)
    have = steps(root, run_id)
    sizes = {s: path_for(root, run_id, s).stat().st_size for s in have}
    partial = sum(_size(t) for t in temporaries(root, run_id))
    total, kept, deleted = sum(sizes.values()) + partial, pins(root, run_id), []
    for s in have[:-1]:
        if total <= cap_bytes:
            break
        if s in kept:
            continue
        path_for(root, run_id, s).unlink(missing_ok=True)
        total -= sizes[s]
        deleted.append(s)
    return deleted


def delete_run(root: Path, run_id: str) -> None:
    """Delete every checkpoint of a run (the run itself is being deleted)."""
    shutil.rmtree(run_dir(root, run_id), ignore_errors=True)
