"""The embedded queue's kombu transport: kombu's filesystem transport, made safe for concurrent use.

kombu's own `_put` creates the message file under its final name and then writes it, so a worker
polling the folder can take a file that is still empty or half-written; its `_get` then raises a JSON
error that kills the Celery worker (kombu issue #1551). Here a message is written under a name the
readers never match (a leading dot), flushed, and renamed into place: a reader sees the whole file or
none. A file that still does not parse (written by something else, truncated by a crash, corrupted on
disk) is moved to `bad/` beside the queue with a warning, and the worker goes on to the next message.

Why not a queue on the store's runs table instead: the worker stays one Celery path for both forms
(the Redis broker's acks, prefetch and per-run children are exercised by every embedded run too), and
the store's claim (queued -> running) already makes a copy too many harmless.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

SCHEME = "normlabfs"


def register() -> None:
    """Make `normlabfs://` name this transport (idempotent; kombu resolves aliases by name)."""
    TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")


def write_atomically(folder: str | Path, name: str, data: bytes) -> Path:
    """Write `data` to folder/name so that no reader ever sees a part of it."""
    final = Path(folder) / name
    aside = Path(folder) / f".{uuid.uuid4().hex}.part"
    try:
        with open(aside, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(aside, final)
    except BaseException:
        with contextlib.suppress(OSError):
            aside.unlink()
        raise
    return final


class Channel(filesystem.Channel):
    # kombu's Channel bases name the second argument differently (message, payload): none fits both
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        try:
            text = dumps(payload)  # type: ignore[no-untyped-call]  # kombu's json is unannotated
            write_atomically(self.data_folder_out, name, text.encode())
        except OSError as exc:
            raise ChannelError(f"Cannot add message {name!r} to {self.data_folder_out}") from exc

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        """The oldest whole message of `queue`; malformed ones are moved aside, never raised."""
        wanted = f"{queue}.msg"
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            path = Path(self.data_folder_in) / name
            taken = Path(self.data_folder_in).parent / "taken" / name
            try:  # a rename is atomic: of several workers, one gets the file
                taken.parent.mkdir(exist_ok=True)
                os.rename(path, taken)
            except OSError:
                continue
            try:
                message: dict[str, Any] = loads(taken.read_bytes())  # type: ignore[no-untyped-call]  # as above
                # what kombu builds from it next: fail here, not there (kombu's Message is unannotated)
                self.Message(message, channel=self)  # type: ignore[no-untyped-call]
            except Exception as exc:  # any malformed file: never fatal to the worker
                self._set_aside(taken, name, exc)
                continue
            with contextlib.suppress(OSError):
                taken.unlink()
            return message
        raise Empty()

    def _set_aside(self, taken: Path, name: str, exc: Exception) -> None:
        bad = Path(self.data_folder_in).parent / "bad"
        try:
            bad.mkdir(exist_ok=True)
            os.replace(taken, bad / name)
            where = bad / name
        except OSError:
            with contextlib.suppress(OSError):
                taken.unlink()
            where = None
        log.warning("queue: skipped malformed message %s (%s); kept as %s", name, exc, where)


class Transport(filesystem.Transport):
    Channel = Channel
