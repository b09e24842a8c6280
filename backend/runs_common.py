"""Shared by the run routes: store row -> RunPublic, limits check, creating and enqueueing runs."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError

from backend.errors import validation_fields
from normlab import fair_queue
from normlab.queue import enqueue_run
from normlab.settings import Settings
from normlab.store import RunRow, Store, new_run_id
from normlab.store.admission import OverCap
from normlab_client.api_models import RunPublic
from normlab_client.events import RunStatus
from normlab_client.spec import RunSpec

log = logging.getLogger(__name__)


def _dt(x: float | None) -> datetime | None:
    return None if x is None else datetime.fromtimestamp(x, UTC)


def run_public(
    store: Store, row: RunRow, tags: list[str] | None = None, queue: dict[str, Any] | None = None
) -> RunPublic:
    """The run as the API shows it; `tags` when the caller already read them (a list of runs); `queue`
    (Store.queue_view, read once for a list) gives a queued run its place in the fair order and an
    estimate of its wait."""
    spec = stored_spec(row)
    position = wait = None
    if row["status"] == RunStatus.QUEUED:
        queue = queue if queue is not None else store.queue_view()
        position = queue["positions"].get(row["id"])
        if position is not None:
            wait = fair_queue.wait_estimate(position, queue["typical_s"], queue["workers"])
    return RunPublic(
        id=row["id"],
        spec=spec,
        status=row["status"],
        owner=row["owner"],
        group_id=row["group_id"],
        created_at=datetime.fromtimestamp(row["created_at"], UTC),
        started_at=_dt(row["started_at"]),
        finished_at=_dt(row["finished_at"]),
        worker_host=row["worker_host"],
        device=row["device"],
        kernel_backend=row["kernel_backend"],
        error=row["error"],
        summary=json.loads(row["summary"]) if row["summary"] else {},
        last_seq=row["last_seq"],
        queue_position=position,
        queue_wait_s=wait,
        name=row["name"],
        note=row["note"],
        tags=tags if tags is not None else store.tags_of([row["id"]]).get(row["id"], []),
    )


class UnreadableSpec(HTTPException):
    """409: the run's stored spec no longer reads as a RunSpec (stored by an older server, or damaged);
    `field` names what is wrong. Its other runs' lists are still served (`RunList.unreadable`)."""

    def __init__(self, run_id: str, field: str, message: str):
        self.run_id, self.field = run_id, field
        self.message = detail = (
            f"Run {run_id}'s stored spec cannot be read ({field}: {message}); delete it "
            f"(DELETE /api/runs/{run_id}) or resubmit a corrected copy."
        )
        super().__init__(409, {"detail": detail, "fields": {field: message}})


def stored_spec(row: RunRow) -> RunSpec:
    """The run's stored spec, or UnreadableSpec naming the field that no longer validates."""
    try:
        return RunSpec.model_validate_json(row["spec"])
    except ValidationError as exc:
        fields = validation_fields(exc.errors())
        field, message = next(iter(fields.items()), ("spec", str(exc)))
        raise UnreadableSpec(row["id"], field, message) from None


def limit_problems(spec: RunSpec, settings: Settings) -> dict[str, str]:
    """Job-size limits of this server (settings), each with what to change (see backend.limits)."""
    from backend.limits import spec_problems

    return spec_problems(spec, settings)


def create_and_enqueue(
    store: Store,
    settings: Settings,
    specs: list[RunSpec],
    owner: str | None,
    group_id: str | None = None,
    before_enqueue: Callable[[list[str]], None] | None = None,
) -> list[str]:
    """Store the resolved specs as queued runs, then queue one training task each. `before_enqueue(ids)`
    runs in between: a group is recorded there, before a worker can start any of its runs (the yield
    watch reads its non-preemptible mark)."""
    from backend.limits import admit, caps_for, server_full, user_full

    problems: dict[str, str] = {}
    for spec in specs:
        problems.update(limit_problems(spec.resolved(), settings))
    if problems:
        raise HTTPException(
            422, {"detail": "; ".join(f"{k}: {v}" for k, v in problems.items()), "fields": problems}
        )
    admit(store, settings, owner, len(specs))  # per-user cap and rate: 429 with Retry-After
    ids = [new_run_id() for _ in specs]
    items = [
        {"id": run_id, "spec": spec.resolved().model_dump(mode="json"), "owner": owner, "group_id": group_id}
        for run_id, spec in zip(ids, specs, strict=True)
    ]
    try:  # the caps again, atomically with the insert: concurrent submissions cannot overshoot them
        store.create_runs(items, **caps_for(settings, owner))
    except OverCap as over:
        if over.which == "server":
            raise server_full(settings, over.active, len(specs)) from None
        raise user_full(settings, over.active, len(specs), None) from None
    if before_enqueue is not None:
        before_enqueue(ids)
    for run_id in ids:
        try:
            enqueue_run(settings, run_id)
        except Exception as exc:  # the broker is down: say so, and don't leave a run queued forever
            log.error("could not queue run %s: %s", run_id, exc)
            store.finish_with_status(
                run_id,
                RunStatus.FAILED,
                f"Could not reach the task queue: {exc}",
                only_from=(RunStatus.QUEUED,),
            )
            raise HTTPException(
                503, "The task queue is unavailable; retry shortly.", headers={"Retry-After": "5"}
            ) from exc
    return ids
