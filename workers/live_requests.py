"""A running run's live requests: a thread takes what the API left for it in the store (interventions,
a checkpoint now) and the engine picks them up at its next step through `poll()`, a cheap deque read.
Live interventions the engine applied are written into the run's stored spec (`keep`), so a resubmit
replays them at the same steps."""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

from normlab.store import Store, lineage
from normlab_client.events import Event

log = logging.getLogger(__name__)


class LiveRequests:
    def __init__(self, store: Store, run_id: str, poll_s: float = 0.1):
        self.store, self.run_id, self.poll_s = store, run_id, poll_s
        self._queue: collections.deque[dict[str, Any]] = collections.deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"requests-{run_id}", daemon=True)
        self._thread.start()

    def poll(self) -> list[dict[str, Any]]:
        """What arrived since the last call (usually nothing: one length check)."""
        out = []
        while self._queue:
            out.append(self._queue.popleft())
        return out

    def keep(self, event: Event) -> None:
        """Record a live intervention the engine applied in the run's spec (new values at its step)."""
        if event.kind == "intervention" and event.payload.get("source") == "live":
            changes = {k: v["new"] for k, v in event.payload["changes"].items()}
            try:
                if not lineage.keep_intervention(self.store, self.run_id, event.step, changes):
                    log.warning(
                        "run %s: its spec holds no more interventions; step %d's is not kept",
                        self.run_id,
                        event.step,
                    )
            except Exception:  # noqa: BLE001 - the event itself is stored; the spec history is best effort
                log.exception("run %s: could not add the intervention to its spec", self.run_id)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._queue.extend(lineage.take(self.store, self.run_id))
            except Exception as exc:  # a database blip: the next poll retries
                log.warning("run %s: could not read its requests: %s", self.run_id, exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
