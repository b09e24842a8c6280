"""The schema of the first release, as its two `create_all` calls made it (store and API tokens).

A store made by that release has these tables and no alembic_version: normlab.store.migrate treats it
as being at this revision.
"""

import sqlalchemy as sa
from alembic import op

revision = "0001_release"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("task", sa.String(32), nullable=False),
        sa.Column("norm", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(128)),
        sa.Column("group_id", sa.String(32)),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float),
        sa.Column("finished_at", sa.Float),
        sa.Column("heartbeat_at", sa.Float),
        sa.Column("worker_host", sa.String(255)),
        sa.Column("device", sa.String(64)),
        sa.Column("kernel_backend", sa.String(64)),
        sa.Column("error", sa.Text),
        sa.Column("summary", sa.Text),
        sa.Column("last_seq", sa.Integer, nullable=False),
        sa.Column("scalars_count", sa.Integer, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
    )
    op.create_index("ix_runs_status_created", "runs", ["status", "created_at"])
    op.create_index("ix_runs_created", "runs", ["created_at"])
    op.create_index("ix_runs_group", "runs", ["group_id"])
    op.create_table(
        "events",
        sa.Column("run_id", sa.String(32), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
    )
    op.create_table(
        "rollups",
        sa.Column("run_id", sa.String(32), primary_key=True),
        sa.Column("level", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("bucket", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("seq_last", sa.Integer, nullable=False),
        sa.Column("step_last", sa.Integer, nullable=False),
        sa.Column("time_last", sa.Float, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_table(
        "cache",
        sa.Column("key", sa.String(128), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float),
    )


def downgrade() -> None:
    for name in ("api_tokens", "cache", "rollups", "events", "runs"):
        op.drop_table(name)
