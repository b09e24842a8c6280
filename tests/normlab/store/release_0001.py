"""A store as the first release (before migrations) wrote it: its tables, copied verbatim from that
release's `normlab/store/schema.py` and `backend/auth.py` and made by the same two `create_all` calls,
filled with runs, events, roll-ups, groups (in the cache) and tokens in that release's formats."""

from __future__ import annotations

import hashlib
import json

from sqlalchemy import Boolean, Column, Engine, Float, Index, Integer, MetaData, String, Table, Text, insert

metadata = MetaData()
runs = Table(
    "runs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("spec", Text, nullable=False),
    Column("task", String(32), nullable=False),
    Column("norm", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("owner", String(128)),
    Column("group_id", String(32)),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    Column("heartbeat_at", Float),
    Column("worker_host", String(255)),
    Column("device", String(64)),
    Column("kernel_backend", String(64)),
    Column("error", Text),
    Column("summary", Text),
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
    Column("payload", Text, nullable=False),
)
rollups = Table(
    "rollups",
    metadata,
    Column("run_id", String(32), primary_key=True),
    Column("level", Integer, primary_key=True, autoincrement=False),
    Column("bucket", Integer, primary_key=True, autoincrement=False),
    Column("seq_last", Integer, nullable=False),
    Column("step_last", Integer, nullable=False),
    Column("time_last", Float, nullable=False),
    Column("data", Text, nullable=False),
)
cache = Table(
    "cache",
    metadata,
    Column("key", String(128), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)
auth_metadata = MetaData()
tokens = Table(
    "api_tokens",
    auth_metadata,
    Column("id", String(16), primary_key=True),
    Column("user", String(128), nullable=False),
    Column("admin", Boolean, nullable=False, default=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float),
)

TOKEN = "nl_release-one-token"
SPEC = {"task": "digits", "norm": "layer", "steps": 30, "seed": 3, "hidden_size": 16}


def make_release_store(engine: Engine) -> dict:
    """Create the release's tables and fill them; returns what was written, to compare after an upgrade."""
    metadata.create_all(engine)
    auth_metadata.create_all(engine)
    run_rows = [
        {
            "id": f"run{i:09d}",
            "spec": json.dumps({**SPEC, "seed": i}),
            "task": "digits",
            "norm": "layer",
            "status": "completed" if i < 3 else "queued",
            "owner": "ada" if i % 2 else None,
            "group_id": "grp000000001" if i < 2 else ("grp000000002" if i == 2 else None),
            "created_at": 1_700_000_000.0 + i,
            "started_at": 1_700_000_001.0 + i if i < 3 else None,
            "finished_at": 1_700_000_009.0 + i if i < 3 else None,
            "heartbeat_at": None,
            "worker_host": "box" if i < 3 else None,
            "device": "cpu" if i < 3 else None,
            "kernel_backend": "torch" if i < 3 else None,
            "error": None,
            "summary": json.dumps({"metrics": {"val_loss": 0.5 - i / 10}, "step": 30}) if i < 3 else None,
            "last_seq": 3 if i < 3 else 0,
            "scalars_count": 1 if i < 3 else 0,
            "cancel_requested": False,
        }
        for i in range(4)
    ]
    event_rows = [
        {
            "run_id": r["id"],
            "seq": seq,
            "step": step,
            "kind": kind,
            "time": 1_700_000_002.0 + seq,
            "payload": p,
        }
        for r in run_rows[:3]
        for seq, step, kind, p in (
            (1, 0, "status", '{"status":"running","message":"","metrics":{}}'),
            (2, 10, "scalars", '{"train_loss":0.7,"val_loss":0.5}'),
            (3, 30, "status", '{"status":"completed","message":"","metrics":{"val_loss":0.5}}'),
        )
    ]
    rollup_rows = [
        {
            "run_id": "run000000000",
            "level": 1,
            "bucket": 0,
            "seq_last": 2,
            "step_last": 10,
            "time_last": 1_700_000_004.0,
            "data": '{"train_loss":[2.8,0.7,0.7,4]}',
        }
    ]
    group_meta = {
        "grp000000001": {
            "kind": "preset",
            "preset": "fig6-batch4",
            "labels": {"run000000000": "LN", "run000000001": "BN"},
            "steps": 30,
        },
        "grp000000002": {"kind": "sweep", "varied": ["norm"]},
    }
    cache_rows = [
        {"key": f"group:{gid}", "value": json.dumps(meta), "updated_at": 1_700_000_100.0}
        for gid, meta in group_meta.items()
    ] + [{"key": "invariance", "value": '{"methods": {}}', "updated_at": 1_700_000_200.0}]
    token_rows = [
        {
            "id": "ab12cd34",
            "user": "ada",
            "admin": True,
            "token_hash": hashlib.sha256(TOKEN.encode()).hexdigest(),
            "created_at": 1_700_000_300.0,
            "revoked_at": None,
        }
    ]
    with engine.begin() as conn:
        conn.execute(insert(runs), run_rows)
        conn.execute(insert(events), event_rows)
        conn.execute(insert(rollups), rollup_rows)
        conn.execute(insert(cache), cache_rows)
        conn.execute(insert(tokens), token_rows)
    return {
        "runs": run_rows,
        "events": event_rows,
        "rollups": rollup_rows,
        "groups": group_meta,
        "tokens": token_rows,
    }
