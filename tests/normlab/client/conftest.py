"""A real `normlab up` (SQLite, one worker) shared by the client tests, a cuttable TCP proxy, and a
store writer for long histories."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

import pytest

from backend.testing import running_lab
from normlab.store import EventRow, Store
from normlab.store.rollup import SCALAR_NAMES

TINY = {"task": "digits", "hidden_size": 16, "eval_every": 20}


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("client-lab"), workers=1) as lab:
        lab.store = Store(f"sqlite:///{lab.data_dir / 'normlab.sqlite'}")
        yield lab
        lab.store.dispose()


def insert_history(store: Store, steps: int, special: dict[int, dict] | None = None) -> str:
    """A completed run with `steps` scalars events written straight into the store (one per step), so a
    test of the download path gets a 20,000-step history in a second instead of minutes of training."""
    run_id = uuid.uuid4().hex[:12]
    spec = {"task": "digits", "steps": steps, "hidden_size": 16}
    from normlab.spec import RunSpec

    store.create_runs([{"id": run_id, "spec": RunSpec(**spec).resolved().model_dump(mode="json")}])
    t0 = 1.7e9
    rows = []
    for i in range(steps):
        values = {
            "train_loss": 2.0 / (1 + i) + (i % 7) * 1e-9,
            "val_loss": (1.5 / (1 + i)) if i % 50 == 0 else None,
            "accuracy": (i % 1000) / 1000 if i % 50 == 0 else None,
            "grad_norm": 0.1 + (i % 13) / 3,
            "lr": 1e-3,
            "steps_per_s": 1000.0 + i % 17,
            "elapsed": i / 1000.0,
        }
        values.update((special or {}).get(i, {}))
        rows.append(EventRow(i + 1, i + 1, "scalars", t0 + i / 1000.0 + 1e-7 * (i % 3), json.dumps(values)))
    status = {"status": "completed", "metrics": {}}
    rows.append(EventRow(steps + 1, steps, "status", t0 + steps, json.dumps(status)))
    for k in range(0, len(rows), 5000):
        chunk = rows[k : k + 5000]
        store.append_events(run_id, chunk, [], sum(r.kind == "scalars" for r in chunk))
    from sqlalchemy import update

    from normlab.store.schema import runs

    with store.engine.begin() as conn:
        conn.execute(
            update(runs).where(runs.c.id == run_id).values(status="completed", finished_at=time.time())
        )
    assert set(values) <= set(SCALAR_NAMES)
    return run_id


class CuttingProxy:
    """A TCP proxy to `target` that cuts the first `cuts` connections after `after_bytes` bytes of the
    answer (an abrupt close mid-stream, as a flaky network does); it records each request's head."""

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
        cut_this = self.cut < self.cuts
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
