"""`Store`: runs, their events and metric roll-ups in SQLite (WAL, the default) or PostgreSQL.

Every method is one short transaction. Writers of a run's events are the worker (while it runs) and
the API/reaper (a terminal status for a queued or lost run); the (run_id, seq) primary key makes a
second writer of the same sequence number fail instead of forking a run's history.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

from sqlalchemy import Engine, create_engine, delete, event, func, insert, select, update
from sqlalchemy.pool import NullPool

from normlab import fair_queue
from normlab.settings import Settings
from normlab.store.admission import admission_lock, check_caps
from normlab.store.deadline import end_abandoned_transactions, held_up, pg_engine
from normlab.store.group_rows import GroupsMixin
from normlab.store.labels import LabelsMixin
from normlab.store.migrate import ensure_current
from normlab.store.rows import RollupRow, RunRow, run_row
from normlab.store.schema import cache, events, rollups, run_tags, runs
from normlab_client.events import RunStatus

log = logging.getLogger(__name__)


class EventRow(NamedTuple):
    seq: int
    step: int
    kind: str
    time: float
    payload: str  # JSON text


SEQ_MAX = 2**31 - 1  # events.seq is an INTEGER (32-bit on PostgreSQL)


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def event_json(run_id: str, row: EventRow) -> str:
    """The Event JSON sent to clients, built around the stored payload text (no re-encoding)."""
    return (
        f'{{"run_id":"{run_id}","seq":{row.seq},"step":{row.step},"kind":"{row.kind}",'
        f'"time":{row.time!r},"payload":{row.payload}}}'
    )


DEFAULT_TIMEOUT_S = 3.0  # see Settings.db_timeout_s


def fold_case(text: str | None) -> str | None:
    """Lower case one character at a time, as PostgreSQL's lower() does (İ → i, not i + U+0307)."""
    return None if text is None else "".join(c.lower()[0] for c in text)


def make_engine(url: str, timeout_s: float | None = None) -> Engine:
    """An engine for `url`; with `timeout_s`, every PostgreSQL call has that deadline (migrations, which
    may rightly take long, go without)."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"timeout": 30, "check_same_thread": False}, hide_parameters=True
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:  # WAL: one writer and many readers at once
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
            # SQLite's own lower() folds ASCII only; search (icontains) then folds as PostgreSQL does
            dbapi_conn.create_function("lower", 1, fold_case, deterministic=True)

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    # pre_ping: after a database outage the pool drops dead connections and recovers by itself (a ping
    # that hangs is cut by the deadline too). hide_parameters: an error's text (logged) names the
    # statement, never the values (tokens' hashes, users' input).
    options: dict[str, Any] = {
        "pool_pre_ping": True,
        "pool_size": 10,
        "max_overflow": 20,
        "hide_parameters": True,
    }
    return pg_engine(url, timeout_s, **options) if timeout_s else create_engine(url, **options)


class Store(GroupsMixin, LabelsMixin):
    """The results store. Rows come back as plain dicts; JSON columns stay text until the API."""

    def __init__(self, url: str, *, pool: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S):
        """`timeout_s`: the deadline of every call to PostgreSQL (normlab/store/deadline.py)."""
        self.url = url
        self.timeout_s = timeout_s if pool else None
        self.engine = (
            make_engine(url, timeout_s)
            if pool
            else create_engine(url, poolclass=NullPool, hide_parameters=True)
        )
        self.is_sqlite = url.startswith("sqlite")
        # An empty database gets every table at the newest revision; an older one is refused (its
        # message names `normlab db upgrade`) rather than served with missing columns.
        ensure_current(self.engine)

    def dispose(self) -> None:
        self.engine.dispose()

    # ---- runs ---------------------------------------------------------------------------------
    def create_runs(
        self, items: list[dict[str, Any]], *, max_active: int | None = None, max_per_owner: int | None = None
    ) -> None:
        """Insert queued runs: each item has id, spec (dict), owner, group_id. With caps, admission and
        insert are one transaction under a lock, so concurrent submissions cannot overshoot them:
        `OverCap` if the runs queued or running (of the server; of the items' owner) plus these would
        exceed them."""
        now = time.time()
        rows = [
            {
                "id": it["id"],
                "spec": json.dumps(it["spec"]),
                "task": it["spec"]["task"],
                "norm": it["spec"]["norm"],
                "status": RunStatus.QUEUED,
                "owner": it.get("owner"),
                "group_id": it.get("group_id"),
                "created_at": now + i * 1e-6,
                "last_seq": 0,
                "scalars_count": 0,
                "cancel_requested": False,
            }
            for i, it in enumerate(items)
        ]
        with self.engine.begin() as conn:
            if max_active is not None or max_per_owner is not None:
                admission_lock(conn, self.is_sqlite)
                check_caps(conn, rows, max_active, max_per_owner)
            conn.execute(insert(runs), rows)

    def get_run(self, run_id: str) -> RunRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.id == run_id)).mappings().first()
            return run_row(row) if row else None

    def list_runs(
        self,
        *,
        task: str | None = None,
        norm: str | None = None,
        status: str | None = None,
        group: str | None = None,
        owner: str | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[RunRow], int]:
        """Runs matching every given filter, newest first, and how many match in all."""
        cond = []
        for col, val in (
            (runs.c.task, task),
            (runs.c.norm, norm),
            (runs.c.status, status),
            (runs.c.group_id, group),
            (runs.c.owner, owner),
        ):
            if val is not None:
                cond.append(col == val)
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

    def queue_position(self, created_at: float) -> int:
        with self.engine.connect() as conn:
            ahead = conn.execute(
                select(func.count())
                .select_from(runs)
                .where(runs.c.status == RunStatus.QUEUED, runs.c.created_at < created_at)
            ).scalar_one()
        return int(ahead) + 1

    def queue_rows(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(queued, running) runs as normlab.fair_queue reads them: id, created_at, owner, group_id."""
        cols = (runs.c.id, runs.c.created_at, runs.c.started_at, runs.c.owner, runs.c.group_id, runs.c.status)
        with self.engine.connect() as conn:
            found = conn.execute(
                select(*cols).where(runs.c.status.in_((RunStatus.QUEUED, RunStatus.RUNNING)))
            ).mappings()
            rows: list[dict[str, Any]] = [dict(r) for r in found]
        return [r for r in rows if r["status"] == RunStatus.QUEUED], [
            r for r in rows if r["status"] == RunStatus.RUNNING
        ]

    def queue_view(self) -> dict[str, Any]:
        """{"positions": {run id: place in the fair order}, "typical_s", "workers"} of the queue now."""
        queued, running = self.queue_rows()
        with self.engine.connect() as conn:
            recent = conn.execute(
                select(runs.c.summary)
                .where(runs.c.status == RunStatus.COMPLETED)
                .order_by(runs.c.finished_at.desc())
                .limit(20)
            ).scalars()
            walls = [(json.loads(s) if s else {}).get("wall_time") for s in recent]
        return {
            "positions": fair_queue.positions(queued, running),
            "typical_s": fair_queue.typical_run_s(walls),
            "workers": len(running),
        }

    def claim_next(self, preferred: str, worker_host: str | None = None) -> RunRow | None:
        """Claim the first queued run in the fair order (normlab.fair_queue), whichever run's message
        brought the worker here: interactive runs overtake batch work, users and groups take turns.
        `preferred` (the message's run) is claimed when nothing else is queued; None when no run is."""
        queued, running = self.queue_rows()
        for run_id in [*fair_queue.order(queued, running), preferred]:
            claimed = self.claim(run_id, worker_host)
            if claimed is not None:  # another worker may have taken the first: try the next
                return claimed
        return None

    def claim(self, run_id: str, worker_host: str | None = None) -> RunRow | None:
        """Mark a queued run running (atomically); None when it was cancelled or deleted meanwhile."""
        now = time.time()
        with self.engine.begin() as conn:
            queued = update(runs).where(runs.c.id == run_id, runs.c.status == RunStatus.QUEUED)
            n = conn.execute(
                queued.values(
                    status=RunStatus.RUNNING,
                    started_at=now,
                    heartbeat_at=now,
                    worker_host=worker_host or socket.gethostname(),
                )
            ).rowcount
            if n != 1:
                return None
            return run_row(conn.execute(select(runs).where(runs.c.id == run_id)).mappings().one())

    def heartbeat(self, run_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(runs)
                .where(runs.c.id == run_id, runs.c.status == RunStatus.RUNNING)
                .values(heartbeat_at=time.time())
            )

    def cancel_requested(self, run_id: str) -> bool:
        """True when a cancel was asked for, or the run is no longer ours to train (lost, deleted)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(runs.c.cancel_requested, runs.c.status).where(runs.c.id == run_id)
            ).first()
        return row is None or bool(row[0]) or row[1] != "running"

    def request_cancel(self, run_id: str) -> tuple[str, EventRow | None]:
        """Cancel a run: a queued one ends now (returns its terminal event); a running one is flagged."""
        ev = self.finish_with_status(
            run_id, RunStatus.CANCELLED, "Cancelled before it started.", only_from=(RunStatus.QUEUED,)
        )
        if ev is not None:
            return RunStatus.CANCELLED, ev
        with self.engine.begin() as conn:
            conn.execute(
                update(runs)
                .where(runs.c.id == run_id, runs.c.status == RunStatus.RUNNING)
                .values(cancel_requested=True)
            )
            row = conn.execute(select(runs.c.status).where(runs.c.id == run_id)).first()
        return (row[0] if row else "missing"), None

    def finish_with_status(
        self,
        run_id: str,
        status: str,
        message: str,
        *,
        only_from: tuple[str, ...],
        stale_before: float | None = None,
    ) -> EventRow | None:
        """Append a terminal status event for a run no worker will finish; None if not in only_from (or,
        with `stale_before`, if its worker sent a heartbeat since then: checked in the same statement)."""
        now = time.time()
        cond = [runs.c.id == run_id, runs.c.status.in_(only_from)]
        if stale_before is not None:
            cond.append(runs.c.heartbeat_at < stale_before)
        with self.engine.begin() as conn:
            n = conn.execute(
                update(runs)
                .where(*cond)
                .values(
                    status=status,
                    finished_at=now,
                    last_seq=runs.c.last_seq + 1,
                    error=message if status in (RunStatus.FAILED, RunStatus.LOST) else None,
                )
            ).rowcount
            if n != 1:
                return None
            seq = conn.execute(select(runs.c.last_seq).where(runs.c.id == run_id)).scalar_one()
            last_step = (
                conn.execute(
                    select(func.max(events.c.step)).where(events.c.run_id == run_id)
                ).scalar_one_or_none()
                or 0
            )
            row = EventRow(
                seq,
                int(last_step),
                "status",
                now,
                json.dumps({"status": status, "message": message, "metrics": {}}, separators=(",", ":")),
            )
            conn.execute(insert(events), [{"run_id": run_id, **row._asdict()}])
        return row

    def stale_runs(self, older_than: float) -> list[str]:
        with self.engine.connect() as conn:
            return list(
                conn.execute(
                    select(runs.c.id).where(
                        runs.c.status == RunStatus.RUNNING, runs.c.heartbeat_at < older_than
                    )
                ).scalars()
            )

    def delete_run(self, run_id: str) -> bool:
        with self.engine.begin() as conn:
            conn.execute(delete(events).where(events.c.run_id == run_id))
            conn.execute(delete(rollups).where(rollups.c.run_id == run_id))
            conn.execute(delete(run_tags).where(run_tags.c.run_id == run_id))
            return conn.execute(delete(runs).where(runs.c.id == run_id)).rowcount == 1

    # ---- events -------------------------------------------------------------------------------
    def append_events(
        self,
        run_id: str,
        rows: list[EventRow],
        buckets: list[dict[str, Any]],
        scalars_added: int,
        finish: dict[str, Any] | None = None,
    ) -> None:
        """One transaction: the events, the roll-up buckets they closed, the run's counters, and
        (with ``finish``) the run's final status and summary, so a reader never sees one without the
        other."""
        values: dict[str, Any] = {}
        if rows:
            values["last_seq"] = rows[-1].seq
        if scalars_added:
            values["scalars_count"] = runs.c.scalars_count + scalars_added
        if finish:
            values.update(finish)
        with self.engine.begin() as conn:
            # the run's row first: a run that is gone (deleted, or not in a store restored meanwhile)
            # gets no rows that nothing would ever read or delete
            if (
                values
                and conn.execute(update(runs).where(runs.c.id == run_id).values(**values)).rowcount == 0
            ):
                return
            if rows:
                conn.execute(insert(events), [{"run_id": run_id, **r._asdict()} for r in rows])
            if buckets:
                conn.execute(insert(rollups), [{"run_id": run_id, **b} for b in buckets])

    def events_after(
        self, run_id: str, after: int, limit: int = 1000, kind: str | None = None
    ) -> list[EventRow]:
        # a cursor past any sequence number an INTEGER column holds means "nothing after": PostgreSQL
        # would refuse the comparison itself (integer out of range)
        after = min(after, SEQ_MAX)
        q = select(events.c.seq, events.c.step, events.c.kind, events.c.time, events.c.payload).where(
            events.c.run_id == run_id, events.c.seq > after
        )
        if kind is not None:
            q = q.where(events.c.kind == kind)
        with self.engine.connect() as conn:
            return [EventRow(*r) for r in conn.execute(q.order_by(events.c.seq).limit(limit))]

    def iter_events(self, run_id: str, kind: str | None = None, chunk: int = 5000) -> Iterator[EventRow]:
        """Every stored event of a run in order, fetched in chunks."""
        after = 0
        while True:
            batch = self.events_after(run_id, after, chunk, kind)
            yield from batch
            if len(batch) < chunk:
                return
            after = batch[-1].seq

    def rollup_rows(self, run_id: str, level: int) -> list[RollupRow]:
        with self.engine.connect() as conn:
            return [
                RollupRow(*r)
                for r in conn.execute(
                    select(rollups.c.seq_last, rollups.c.step_last, rollups.c.time_last, rollups.c.data)
                    .where(rollups.c.run_id == run_id, rollups.c.level == level)
                    .order_by(rollups.c.bucket)
                )
            ]

    # ---- cache ----------------------------------------------------------------------------------
    def cache_get(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(select(cache.c.value).where(cache.c.key == key)).scalar_one_or_none()

    def cache_set(self, key: str, value: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(cache).where(cache.c.key == key))
            conn.execute(insert(cache).values(key=key, value=value, updated_at=time.time()))

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(select(1))

    def end_abandoned_transactions(self) -> int:
        """PostgreSQL: end this application's sessions left idle in a transaction for over twice the
        deadline (normlab/store/deadline.py); how many. SQLite has no such sessions: 0."""
        if self.is_sqlite or not self.timeout_s:
            return 0
        return end_abandoned_transactions(self.engine, 2 * self.timeout_s)

    def after_held_up(self, exc: BaseException) -> None:
        """After a call failed with `exc`: if it waited on rows that a session cut off from its client
        holds, end such sessions so the retry can go through (never raises)."""
        if held_up(exc):
            try:
                self.end_abandoned_transactions()
            except Exception as again:  # the database went away meanwhile: the retry will say so
                log.warning("could not look for abandoned sessions: %s", str(again)[:200])


_stores: dict[str, Store] = {}
_lock = threading.Lock()


def get_store(settings: Settings) -> Store:
    """One Store per database URL per process (creating the data directory for SQLite)."""
    url = settings.resolved_database_url
    with _lock:
        if url not in _stores:
            if url.startswith("sqlite"):
                settings.data_dir.mkdir(parents=True, exist_ok=True)
            _stores[url] = Store(url, timeout_s=settings.db_timeout_s)
        return _stores[url]
