"""The store's run labels and search: a run's name, tags and markdown note, and runs found by text,
tag, owner, task, normalizer, status, group and date."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Engine, delete, func, insert, or_, select, update

from normlab.store.rows import RunRow, run_row
from normlab.store.schema import run_tags, runs
from normlab_client.events import RunStatus


@dataclass(frozen=True)
class RunQuery:
    """What to look for; every field given must match (None: any)."""

    text: str | None = None  # in the id, name, note, owner, task or normalizer (any case)
    tag: str | None = None
    owner: str | None = None
    task: str | None = None
    norm: str | None = None
    status: str | None = None
    group: str | None = None
    created_after: float | None = None  # epoch seconds, inclusive
    created_before: float | None = None  # exclusive


def _conditions(q: RunQuery) -> list[ColumnElement[bool]]:
    cond: list[ColumnElement[bool]] = []
    for col, val in (
        (runs.c.task, q.task),
        (runs.c.norm, q.norm),
        (runs.c.status, q.status),
        (runs.c.group_id, q.group),
        (runs.c.owner, q.owner),
    ):
        if val is not None:
            cond.append(col == val)
    if q.tag is not None:
        cond.append(runs.c.id.in_(select(run_tags.c.run_id).where(run_tags.c.tag == q.tag)))
    if q.text:
        searched = (runs.c.id, runs.c.name, runs.c.note, runs.c.owner, runs.c.task, runs.c.norm)
        cond.append(or_(*(c.icontains(q.text, autoescape=True) for c in searched)))
    if q.created_after is not None:
        cond.append(runs.c.created_at >= q.created_after)
    if q.created_before is not None:
        cond.append(runs.c.created_at < q.created_before)
    return cond


class LabelsMixin:
    engine: Engine

    def set_labels(
        self, run_id: str, *, name: Any = ..., note: Any = ..., tags: Sequence[str] | None = None
    ) -> bool:
        """Change what is given (name/note: a string, or None to clear; tags: the whole new set).
        False when the run does not exist."""
        values = {k: v for k, v in (("name", name), ("note", note)) if v is not ...}
        with self.engine.begin() as conn:
            found = conn.execute(select(runs.c.id).where(runs.c.id == run_id)).first()
            if found is None:
                return False
            if values:
                conn.execute(update(runs).where(runs.c.id == run_id).values(**values))
            if tags is not None:
                conn.execute(delete(run_tags).where(run_tags.c.run_id == run_id))
                unique = sorted(set(tags))
                if unique:
                    conn.execute(insert(run_tags), [{"run_id": run_id, "tag": t} for t in unique])
        return True

    def tags_of(self, run_ids: Sequence[str]) -> dict[str, list[str]]:
        """Each run's tags, sorted (runs without tags are absent)."""
        out: dict[str, list[str]] = {}
        if not run_ids:
            return out
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(run_tags.c.run_id, run_tags.c.tag)
                .where(run_tags.c.run_id.in_(list(run_ids)))
                .order_by(run_tags.c.run_id, run_tags.c.tag)
            )
            for run_id, tag in rows:
                out.setdefault(run_id, []).append(tag)
        return out

    def search_runs(self, query: RunQuery, *, offset: int = 0, limit: int = 50) -> tuple[list[RunRow], int]:
        """Runs matching the query, newest first, and how many match in all."""
        cond = _conditions(query)
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(runs).where(*cond)).scalar_one()
            rows = (
                conn.execute(
                    select(runs).where(*cond).order_by(runs.c.created_at.desc()).offset(offset).limit(limit)
                )
                .mappings()
                .all()
            )
        return [run_row(r) for r in rows], int(total)

    def old_runs(self, before: float, *, keep_tagged: bool) -> list[dict[str, Any]]:
        """Ended runs that finished (or, never started, were created) before the time, oldest first:
        what `normlab gc` deletes. Queued and running runs are never old."""
        ended = func.coalesce(runs.c.finished_at, runs.c.created_at)
        cond: list[ColumnElement[bool]] = [
            ended < before,
            runs.c.status.notin_((RunStatus.QUEUED, RunStatus.RUNNING)),
        ]
        if keep_tagged:
            cond.append(runs.c.id.notin_(select(run_tags.c.run_id)))
        cols = (runs.c.id, runs.c.name, runs.c.owner, runs.c.status, runs.c.created_at, runs.c.scalars_count)
        with self.engine.connect() as conn:
            rows = conn.execute(select(*cols).where(*cond).order_by(ended)).mappings()
            return [dict(r) for r in rows]
