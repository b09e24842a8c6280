"""A `groups` table for what launched a group of runs; moves each group's metadata out of the cache
(keys "group:<id>"), keeping its time as the group's created_at."""

import json

import sqlalchemy as sa
from alembic import op

revision = "0002_groups"
down_revision = "0001_release"
branch_labels = None
depends_on = None

cache = sa.table("cache", sa.column("key", sa.String), sa.column("value", sa.Text), sa.column("updated_at"))


def upgrade() -> None:
    groups = op.create_table(
        "groups",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("preset", sa.String(64)),
        sa.Column("meta", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    conn = op.get_bind()
    old = conn.execute(sa.select(cache).where(cache.c.key.like("group:%"))).all()
    rows = []
    for key, value, updated_at in old:
        meta = json.loads(value)
        kind = meta.get("kind") if meta.get("kind") in ("preset", "sweep") else "group"
        preset = meta.get("preset") if kind == "preset" else None
        rows.append(
            {
                "id": key[len("group:") :],
                "kind": kind,
                "preset": preset,
                "meta": value,
                "created_at": updated_at,
            }
        )
    if rows:
        op.bulk_insert(groups, rows)
        conn.execute(sa.delete(cache).where(cache.c.key.like("group:%")))


def downgrade() -> None:
    groups = sa.table("groups", sa.column("id"), sa.column("meta"), sa.column("created_at"))
    conn = op.get_bind()
    rows = [
        {"key": f"group:{gid}", "value": meta, "updated_at": created}
        for gid, meta, created in conn.execute(sa.select(groups))
    ]
    if rows:
        conn.execute(sa.insert(cache), rows)
    op.drop_table("groups")
