"""Forks and live requests in the results store: who forked from whom at which step, what the API asked
of a running run (interventions, a checkpoint now), and the intervention history a run's spec keeps."""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import delete, func, insert, select, update

from normlab.store.schema import events, lineage, run_requests, runs
from normlab.store.store import Store
from normlab_client.events import RunStatus
from normlab_client.spec import Intervention, RunSpec


def record_fork(store: Store, child_id: str, parent_id: str, step: int, kind: str = "fork") -> None:
    with store.engine.begin() as conn:
        conn.execute(
            insert(lineage).values(
                child_id=child_id, parent_id=parent_id, step=step, kind=kind, created_at=time.time()
            )
        )


def parent_of(store: Store, run_id: str) -> dict[str, Any] | None:
    with store.engine.connect() as conn:
        row = conn.execute(select(lineage).where(lineage.c.child_id == run_id)).mappings().first()
    return None if row is None else {"id": row["parent_id"], "step": row["step"], "kind": row["kind"]}


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
    """A deleted run leaves the tree (its children keep their own history) and its open requests go."""
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


def keep_intervention(store: Store, run_id: str, step: int, changes: dict[str, Any]) -> None:
    """Add a live intervention to the run's stored spec, so resubmitting the run replays it at `step`."""
    with store.engine.begin() as conn:
        text = conn.execute(select(runs.c.spec).where(runs.c.id == run_id)).scalar_one_or_none()
        if text is None:
            return
        spec = RunSpec.model_validate_json(text)
        items = [*spec.interventions, Intervention(step=step, **changes)]
        items.sort(key=lambda i: i.step)
        new = spec.model_copy(update={"interventions": items})
        conn.execute(update(runs).where(runs.c.id == run_id).values(spec=new.model_dump_json()))
