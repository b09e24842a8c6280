"""A real `normlab up` (SQLite, one worker) shared by the client tests, a cuttable TCP proxy, and a
store writer for long histories."""

from __future__ import annotations

import socket
import threading

import pytest

from benchmarks.client import write_history as insert_history  # noqa: F401  (the tests' name)
from benchmarks.service import running_lab
from normlab.store import Store

TINY = {"task": "digits", "hidden_size": 16, "eval_every": 20}


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("client-lab"), workers=1) as lab:
        lab.store = Store(f"sqlite:///{lab.data_dir / 'normlab.sqlite'}")
        yield lab
        lab.store.dispose()


class CuttingProxy:
    """A TCP proxy to `target` that cuts the first `cuts` connections after `after_bytes` bytes of the
    answer of an event stream (an abrupt close mid-stream, as a flaky network does); it records the
    first request head of each connection."""

    def __init__(self, target: tuple[str, int], after_bytes: int, cuts: int):
        self.target, self.after_bytes, self.cuts = target, after_bytes, cuts
        self.heads: list[str] = []
        self.cut = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(down,), daemon=True).start()

    def _serve(self, down: socket.socket) -> None:
        up = socket.create_connection(self.target)
        head = down.recv(65536)
        self.heads.append(head.decode("latin-1"))
        up.sendall(head)
        cut_this = "/events" in head.decode("latin-1") and self.cut < self.cuts
        if cut_this:
            self.cut += 1
        sent = 0
        try:
            while True:
                data = up.recv(4096)
                if not data:
                    break
                if cut_this and sent + len(data) > self.after_bytes:
                    down.sendall(data[: self.after_bytes - sent])
                    break
                down.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (up, down):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self.sock.close()
