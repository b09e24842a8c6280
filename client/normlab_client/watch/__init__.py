"""`Watch`: a PyTorch training loop of your own, streamed into the lab as a normlab run
(`Client.watch(model, name=…)`; docs/watch.md). Imports the user's torch: loaded only by `watch()`.

    with Client(url, token=...).watch(model, name="my-gpt", every=10) as w:
        for step, batch in enumerate(loader, 1):
            loss = ...; loss.backward(); opt.step(); opt.zero_grad()
            w.log(step, train_loss=loss.item(), lr=sched.get_last_lr()[0])

Every `every` steps `log` records the statistics of every normalization module (normlab_client.watch.stats)
and the scalars given; a background thread sends them (normlab_client.watch.sender). A server that is
away gets them later, in order; one that refuses gets one warning; the loop never waits on either.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from normlab_client.errors import NormlabError
from normlab_client.http import Http
from normlab_client.watch.sender import Sender
from normlab_client.watch.stats import Hooks

log = logging.getLogger("normlab_client.watch")


class Watch:
    def __init__(
        self,
        http: Http,
        model: Any,
        name: str,
        every: int = 10,
        norms: list[str] | None = None,
        steps: int | None = None,
        script: str | None = None,
    ):
        if every < 1:
            raise ValueError(f"every must be ≥ 1 (got {every})")
        self.http, self.name, self.every, self.steps = http, name, every, steps
        self.script = script if script is not None else Path(sys.argv[0] or "python").name
        self.hooks = Hooks(model, list(norms or []))
        self.hooks.active = every == 1  # the first step is step 1
        self.run_id: str | None = None
        self.sender: Sender | None = None
        self._start = time.monotonic()
        self._last: tuple[int, float] | None = None  # (step, time) of the last record: steps/s
        self._step = 0

    @property
    def modules(self) -> list[str]:
        """The paths of the norm modules watched."""
        return list(self.hooks.norms)

    def __enter__(self) -> Watch:
        body = {"name": self.name, "script": self.script, "every": self.every, "steps": self.steps}
        try:
            created = self.http.request("POST", "/api/watched", json=body).json()
        except NormlabError as exc:
            log.warning("normlab: could not open a watched run (%s); training goes on unwatched", exc)
            return self
        self.run_id = str(created["id"])
        self.sender = Sender(self.http, self.run_id, int(created["last_seq"]))
        return self

    def log(
        self, step: int, train_loss: float | None = None, lr: float | None = None, **extra: float
    ) -> None:
        """The end of optimizer step `step` (1, 2, …): on every `every`-th, record the modules' statistics
        and these scalars (lr: 0 when not given)."""
        self._step = step
        if step % self.every == 0:
            self._record(step, train_loss, lr, extra)
        self.hooks.active = (step + 1) % self.every == 0

    def _record(self, step: int, train_loss: float | None, lr: float | None, extra: dict[str, float]) -> None:
        modules, recurrent, grad_norm = self.hooks.read()
        if self.sender is None:
            return
        now = time.monotonic()
        last_step, last_t = self._last or (0, self._start)
        rate = (step - last_step) / (now - last_t) if now > last_t else 0.0
        self._last = (step, now)
        if train_loss is not None:
            scalars = {
                "train_loss": float(train_loss),
                "lr": float(lr) if lr is not None else 0.0,
                "grad_norm": grad_norm if grad_norm is not None and math.isfinite(grad_norm) else 0.0,
                "steps_per_s": rate,
                "elapsed": now - self._start,
                **{k: float(v) for k, v in extra.items()},
            }
            self.sender.put(step, "scalars", scalars)
        self.sender.put(step, "hidden", {"watched": True, "modules": modules, "recurrent": recurrent})

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.hooks.remove()
        if self.sender is None:
            return
        if kind is None:
            status = {"status": "completed", "message": None}
        else:
            status = {"status": "failed", "message": f"{kind.__name__}: {exc}"[:500]}
        self.sender.put(self._step, "status", status)
        self.sender.close()
