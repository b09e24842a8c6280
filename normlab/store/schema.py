"""The results store's tables (SQLAlchemy 2 Core): runs, their events, metric roll-ups, a small cache.

Times are epoch seconds (floats) so SQLite and PostgreSQL sort and compare them the same way; JSON
columns are text so an event's payload travels to SSE clients without being parsed and re-encoded.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

runs = Table(
    "runs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("spec", Text, nullable=False),  # the resolved RunSpec, JSON
    Column("task", String(32), nullable=False),  # copied out of the spec for filtering
    Column("norm", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("owner", String(128)),
    Column("group_id", String(32)),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    Column("heartbeat_at", Float),  # the worker's last sign of life; stale -> 'lost'
    Column("worker_host", String(255)),
    Column("device", String(64)),
    Column("kernel_backend", String(64)),
    Column("error", Text),
    Column("summary", Text),  # JSON: final metrics, probes, wall_time, step
    Column("last_seq", Integer, nullable=False, default=0),
    Column("scalars_count", Integer, nullable=False, default=0),
    Column("cancel_requested", Boolean, nullable=False, default=False),
)
Index("ix_runs_status_created", runs.c.status, runs.c.created_at)
Index("ix_runs_created", runs.c.created_at)
Index("ix_runs_group", runs.c.group_id)

events = Table(
    "events",
    metadata,
    Column("run_id", String(32), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("step", Integer, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("time", Float, nullable=False),
    Column("payload", Text, nullable=False),  # JSON
)

# Pre-aggregated scalars so a 1,000,000-point history downsamples by reading ~2,000 rows: level L holds
# buckets of 4**L consecutive `scalars` events (by their index within the run), each with every metric's
# mean/min/max/count. The worker writes a bucket when it completes; the open tail is read raw.
rollups = Table(
    "rollups",
    metadata,
    Column("run_id", String(32), primary_key=True),
    Column("level", Integer, primary_key=True, autoincrement=False),
    Column("bucket", Integer, primary_key=True, autoincrement=False),
    Column("seq_last", Integer, nullable=False),
    Column("step_last", Integer, nullable=False),
    Column("time_last", Float, nullable=False),
    Column("data", Text, nullable=False),  # JSON {name: [mean, min, max, count]}
)

cache = Table(
    "cache",
    metadata,
    Column("key", String(128), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)
