"""Admission on the runs table: caps on queued + running runs checked and the new runs inserted in one
transaction, under a lock every API process takes, so that concurrent submissions cannot overshoot a
cap (counting in one transaction and inserting in another let 35 of 60 concurrent submits through a
cap of 20)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select, update

from normlab.store.schema import runs
from normlab_client.events import RunStatus

ADMISSION_LOCK_KEY = 0x6E6C6164  # any fixed number: every normlab API takes the same lock
ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING)


class OverCap(Exception):
    """Admission refused: `which` is "server" or "owner", `active` the runs already queued or running."""

    def __init__(self, which: str, active: int):
        super().__init__(f"{which}: {active} active")
        self.which, self.active = which, active


def check_caps(
    conn: Connection, rows: list[dict[str, Any]], max_active: int | None, max_per_owner: int | None
) -> None:
    if max_active is not None:
        total = conn.execute(
            select(func.count()).select_from(runs).where(runs.c.status.in_(ACTIVE))
        ).scalar_one()
        if total + len(rows) > max_active:
            raise OverCap("server", int(total))
    owners = {r["owner"] for r in rows if r["owner"] is not None}
    if max_per_owner is not None:
        for owner in owners:
            mine = conn.execute(
                select(func.count()).select_from(runs).where(runs.c.owner == owner, runs.c.status.in_(ACTIVE))
            ).scalar_one()
            if mine + sum(r["owner"] == owner for r in rows) > max_per_owner:
                raise OverCap("owner", int(mine))


def admission_lock(conn: Connection, is_sqlite: bool) -> None:
    """Serialise admissions until this transaction ends (PostgreSQL: an advisory lock; SQLite: a write
    as the transaction's first statement takes the database's write lock, waiting for the one before)."""
    if is_sqlite:
        conn.execute(update(runs).where(runs.c.id.is_(None)).values(last_seq=runs.c.last_seq))
    else:
        conn.execute(select(func.pg_advisory_xact_lock(ADMISSION_LOCK_KEY)))
