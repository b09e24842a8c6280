"""Forks and live requests in the results store: who forked from whom at which step, what the API asked
of a running run (interventions, a checkpoint now), and the intervention history a run's spec keeps."""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, delete, func, insert, select, update

from normlab.store.schema import events, lineage, run_requests, runs
from normlab.store.store import Store
from normlab_client.events import RunStatus
from normlab_client.spec import MAX_INTERVENTIONS, Intervention, RunSpec


def record_fork(store: Store, child_id: str, parent_id: str, step: int, kind: str = "fork") -> None:
    with store.engine.begin() as conn:
        conn.execute(
            insert(lineage).values(
                child_id=child_id, parent_id=parent_id, step=step, kind=kind, created_at=time.time()
            )
        )


def parent_of(store: Store, run_id: str) -> dict[str, Any] | None:
    """{id, step, kind, deleted}: `deleted` when the parent run (and its checkpoints) is gone."""
    q = (
        select(lineage, runs.c.id.label("parent_row"))
        .outerjoin(runs, runs.c.id == lineage.c.parent_id)
        .where(lineage.c.child_id == run_id)
    )
    with store.engine.connect() as conn:
        row = conn.execute(q).mappings().first()
    if row is None:
        return None
    return {
        "id": row["parent_id"],
        "step": row["step"],
        "kind": row["kind"],
        "deleted": row["parent_row"] is None,
    }


def active_children(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's children that are queued or running: a queued child still has to load the run's
    checkpoint, a running one may need it again (resumed before its own first checkpoint)."""
    return [c for c in children_of(store, run_id) if c["status"] in (RunStatus.QUEUED, RunStatus.RUNNING)]


def children_of(store: Store, run_id: str) -> list[dict[str, Any]]:
    """A run's children, oldest first: {id, step, kind, norm, status}."""
    q = (
        select(lineage.c.child_id, lineage.c.step, lineage.c.kind, runs.c.norm, runs.c.status)
        .join(runs, runs.c.id == lineage.c.child_id)
        .where(lineage.c.parent_id == run_id)
        .order_by(lineage.c.created_at)
    )
    with store.engine.connect() as conn:
        return [
            {"id": r[0], "step": r[1], "kind": r[2], "norm": r[3], "status": r[4]} for r in conn.execute(q)
        ]


def family(store: Store, run_id: str) -> list[str]:
    """Every run of a run's tree (its root and all descendants), root first."""
    root = run_id
    for _ in range(1000):  # a tree deeper than this is not made by hand
        up = parent_of(store, root)
        if up is None:
            break
        root = up["id"]
    out: list[str] = []
    todo = [root]
    while todo and len(out) < 500:
        rid = todo.pop(0)
        out.append(rid)
        todo += [c["id"] for c in children_of(store, rid)]
    return out


def last_scalars_step(store: Store, run_id: str) -> int:
    """The step of the run's last stored `scalars` event (0 without one)."""
    q = select(func.max(events.c.step)).where(events.c.run_id == run_id, events.c.kind == "scalars")
    with store.engine.connect() as conn:
        return int(conn.execute(q).scalar_one_or_none() or 0)


def checkpoint_failures(store: Store, run_id: str) -> list[tuple[int, str]]:
    """(step, why) of the run's checkpoints its worker could not write (a full disk), from its log."""
    q = (
        select(events.c.payload)
        .where(
            events.c.run_id == run_id,
            events.c.kind == "log",
            events.c.payload.contains('"checkpoint_failed"'),
        )
        .order_by(events.c.seq)
    )
    with store.engine.connect() as conn:
        found = [json.loads(p).get("checkpoint_failed") for (p,) in conn.execute(q)]
    return [(int(f["step"]), str(f["reason"])) for f in found if isinstance(f, dict)]


def reopen_lost(store: Store, run_id: str, from_step: int) -> bool:
    """Queue a `lost` run again, to continue from its checkpoint of `from_step` (False when it is not
    lost). Its stored `lost` status event becomes a warning in its log: the run goes on, so its history
    no longer ends there (a stream reading it from the start continues past it)."""
    with store.engine.begin() as conn:
        n = conn.execute(
            update(runs)
            .where(runs.c.id == run_id, runs.c.status == RunStatus.LOST)
            .values(status=RunStatus.QUEUED, finished_at=None, error=None, cancel_requested=False)
        ).rowcount
        if n != 1:
            return False
        last = conn.execute(
            select(events.c.seq, events.c.payload)
            .where(events.c.run_id == run_id, events.c.kind == "status")
            .order_by(events.c.seq.desc())
            .limit(1)
        ).first()
        if last is not None and json.loads(last[1]).get("status") == RunStatus.LOST:
            lost = json.loads(last[1])
            message = (
                f"{lost.get('message') or 'The worker was lost.'} Resumed from the checkpoint of step "
                f"{from_step}: the steps after it are trained again and reported once."
            )
            payload = {"level": "warning", "message": message}
            conn.execute(
                update(events)
                .where(events.c.run_id == run_id, events.c.seq == last[0])
                .values(kind="log", payload=json.dumps(payload, separators=(",", ":")))
            )
    return True


def forget(store: Store, run_id: str) -> None:
    """A deleted run leaves the tree as a child and its open requests go; its children keep naming it
    (`parent_of` tells them it was deleted) and keep their own history."""
    with store.engine.begin() as conn:
        conn.execute(delete(lineage).where(lineage.c.child_id == run_id))
        conn.execute(delete(run_requests).where(run_requests.c.run_id == run_id))


def ask(store: Store, run_id: str, kind: str, payload: dict[str, Any]) -> None:
    """Leave a request for a running run's worker (kind 'intervention' or 'checkpoint')."""
    with store.engine.begin() as conn:
        conn.execute(
            insert(run_requests).values(
                run_id=run_id, kind=kind, payload=json.dumps(payload), created_at=time.time()
            )
        )


def take(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's requests not yet taken, oldest first, marked taken ({"kind", …payload})."""
    now = time.time()
    with store.engine.begin() as conn:
        rows = conn.execute(
            select(run_requests.c.id, run_requests.c.kind, run_requests.c.payload)
            .where(run_requests.c.run_id == run_id, run_requests.c.taken_at.is_(None))
            .order_by(run_requests.c.id)
        ).all()
        if rows:
            conn.execute(
                update(run_requests).where(run_requests.c.id.in_([r[0] for r in rows])).values(taken_at=now)
            )
    return [{"kind": r[1], **json.loads(r[2])} for r in rows]


class TooManyInterventions(Exception):
    """The run has as many interventions as a spec holds (its spec's and those asked live, together)."""

    def __init__(self, run_id: str, used: int):
        super().__init__(
            f"Run {run_id} has {used} interventions already (asked live or in its spec); a run keeps at "
            f"most {MAX_INTERVENTIONS}. Fork it with the changes instead."
        )
        self.used = used


def _lock_run(conn: Connection, run_id: str) -> str | None:
    """The run's stored spec, its row locked until the transaction ends (SQLite: the write lock, taken by
    a write as the transaction's first statement; PostgreSQL: the row's lock)."""
    conn.execute(update(runs).where(runs.c.id == run_id).values(last_seq=runs.c.last_seq))
    return conn.execute(select(runs.c.spec).where(runs.c.id == run_id)).scalar_one_or_none()


def ask_intervention(store: Store, run_id: str, changes: dict[str, Any]) -> None:
    """Leave a live intervention for the run's worker, or raise TooManyInterventions: every one asked
    counts (a pending request until the worker keeps it in the spec, then a spec entry), checked and
    inserted under the run's lock so concurrent requests cannot overshoot the cap."""
    with store.engine.begin() as conn:
        text = _lock_run(conn, run_id)
        in_spec = len(json.loads(text).get("interventions") or []) if text else 0
        pending = conn.execute(
            select(func.count())
            .select_from(run_requests)
            .where(run_requests.c.run_id == run_id, run_requests.c.kind == "intervention")
        ).scalar_one()
        if in_spec + pending >= MAX_INTERVENTIONS:
            raise TooManyInterventions(run_id, in_spec + pending)
        conn.execute(
            insert(run_requests).values(
                run_id=run_id,
                kind="intervention",
                payload=json.dumps({"changes": changes}),
                created_at=time.time(),
            )
        )


def keep_intervention(store: Store, run_id: str, step: int, changes: dict[str, Any]) -> bool:
    """Add a live intervention to the run's stored spec, so resubmitting the run replays it at `step`;
    its request stops counting (it is now a spec entry). False, the spec unchanged, when the result
    would not be a valid spec: a stored spec must always read back."""
    with store.engine.begin() as conn:
        text = _lock_run(conn, run_id)
        if text is None:
            return False
        data = json.loads(text)
        items = [*(data.get("interventions") or []), Intervention(step=step, **changes).model_dump()]
        items.sort(key=lambda i: i["step"])
        try:
            new = RunSpec.model_validate({**data, "interventions": items})
        except ValidationError:
            return False
        conn.execute(update(runs).where(runs.c.id == run_id).values(spec=new.model_dump_json()))
        oldest = (
            select(run_requests.c.id)
            .where(
                run_requests.c.run_id == run_id,
                run_requests.c.kind == "intervention",
                run_requests.c.taken_at.is_not(None),
            )
            .order_by(run_requests.c.id)
            .limit(1)
            .scalar_subquery()
        )
        conn.execute(delete(run_requests).where(run_requests.c.id == oldest))
    return True
