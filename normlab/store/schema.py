"""Every table of the results store (SQLAlchemy 2 Core), in one `MetaData`: runs, their tags and events,
metric roll-ups, groups, API tokens and a small cache.

This is the schema at the migrations' head (`normlab/migrations/versions`): a change here needs a new
revision there (tests/normlab/test_migrations.py compares the two).

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
    Column("name", String(200)),  # what people call the run; ids stay the key
    Column("note", Text),  # markdown, edited by the owner or an admin
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

run_tags = Table(
    "run_tags",
    metadata,
    Column("run_id", String(32), primary_key=True),
    Column("tag", String(64), primary_key=True),
)
Index("ix_run_tags_tag", run_tags.c.tag)

# What launched a group of runs (a preset over seeds, or a sweep); its runs point here by runs.group_id.
groups = Table(
    "groups",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("kind", String(16), nullable=False),  # preset | sweep
    Column("preset", String(64)),
    Column("meta", Text, nullable=False),  # JSON: labels and steps (preset) or varied fields (sweep)
    Column("created_at", Float, nullable=False),
)

# API tokens of a shared lab server (backend.auth), kept as SHA-256 hashes.
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String(16), primary_key=True),  # public handle for `normlab token revoke`
    Column("user", String(128), nullable=False),
    Column("admin", Boolean, nullable=False, default=False),
    Column("token_hash", String(64), nullable=False, unique=True),  # sha256 hex; the token is never stored
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float),
)

cache = Table(
    "cache",
    metadata,
    Column("key", String(128), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# Forks: each child's parent and the parent's checkpoint step it started from (kind 'fork' or 'resume').
lineage = Table(
    "lineage",
    metadata,
    Column("child_id", String(32), primary_key=True),
    Column("parent_id", String(32), nullable=False),
    Column("step", Integer, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
)
Index("ix_lineage_parent", lineage.c.parent_id)

# What the API asks of a running run (an intervention, a checkpoint now); its worker takes each once.
run_requests = Table(
    "run_requests",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(32), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("payload", Text, nullable=False),  # JSON
    Column("created_at", Float, nullable=False),
    Column("taken_at", Float),
)
Index("ix_run_requests_run", run_requests.c.run_id, run_requests.c.taken_at)
