"""Fisher payloads name the probes' scale-invariant weight sets "weight_sets"; they said "groups", the
word the store also uses for groups of runs. Rewrites the key in stored fisher events and in run
summaries' probes (the last fisher payload and each fisher_series entry); downgrade puts "groups" back.
Nothing else changes."""

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0005_weight_sets"
down_revision = "0004_lineage"
branch_labels = None
depends_on = None

events = sa.table(
    "events",
    sa.column("run_id", sa.String),
    sa.column("seq", sa.Integer),
    sa.column("kind", sa.String),
    sa.column("payload", sa.Text),
)
runs = sa.table("runs", sa.column("id", sa.String), sa.column("summary", sa.Text))
BATCH = 500


def _renamed(payload: Any, old: str, new: str) -> dict[str, Any] | None:
    """The payload with its key `old` called `new`, in place of it; None when there is nothing to do."""
    if not isinstance(payload, dict) or old not in payload or new in payload:
        return None
    return {(new if k == old else k): v for k, v in payload.items()}


def _events(old: str, new: str) -> None:
    conn = op.get_bind()
    last = ("", -1)
    while True:
        rows = conn.execute(
            sa.select(events.c.run_id, events.c.seq, events.c.payload)
            .where(events.c.kind == "fisher", sa.tuple_(events.c.run_id, events.c.seq) > last)
            .order_by(events.c.run_id, events.c.seq)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        for run_id, seq, text in rows:
            payload = _renamed(json.loads(text), old, new)
            if payload is not None:
                conn.execute(
                    sa.update(events)
                    .where(events.c.run_id == run_id, events.c.seq == seq)
                    .values(payload=json.dumps(payload, separators=(",", ":")))
                )
        last = (rows[-1][0], rows[-1][1])


def _summaries(old: str, new: str) -> None:
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(runs.c.id, runs.c.summary).where(
            runs.c.summary.is_not(None), runs.c.summary.like(f'%"{old}"%')
        )
    ).all()
    for run_id, text in rows:
        summary: Any = json.loads(text)
        probes: Any = summary.get("probes") if isinstance(summary, dict) else None
        if not isinstance(probes, dict):
            continue
        changed = False
        fisher = _renamed(probes.get("fisher"), old, new)
        if fisher is not None:
            probes["fisher"], changed = fisher, True
        series: Any = probes.get("fisher_series")
        for i, entry in enumerate(series if isinstance(series, list) else []):
            renamed = _renamed(entry, old, new)
            if renamed is not None:
                series[i], changed = renamed, True
        if changed:
            conn.execute(sa.update(runs).where(runs.c.id == run_id).values(summary=json.dumps(summary)))


def upgrade() -> None:
    _events("groups", "weight_sets")
    _summaries("groups", "weight_sets")


def downgrade() -> None:
    _events("weight_sets", "groups")
    _summaries("weight_sets", "groups")
