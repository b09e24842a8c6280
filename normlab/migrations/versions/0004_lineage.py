"""Forks and live requests: a `lineage` table (each child's parent and fork step) and `run_requests`
(interventions and checkpoint requests the API leaves for a running run's worker)."""

import sqlalchemy as sa
from alembic import op

revision = "0004_lineage"
down_revision = "0003_run_labels"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lineage",
        sa.Column("child_id", sa.String(32), primary_key=True),
        sa.Column("parent_id", sa.String(32), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_lineage_parent", "lineage", ["parent_id"])
    op.create_table(
        "run_requests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("taken_at", sa.Float),
    )
    op.create_index("ix_run_requests_run", "run_requests", ["run_id", "taken_at"])


def downgrade() -> None:
    op.drop_index("ix_run_requests_run", "run_requests")
    op.drop_table("run_requests")
    op.drop_index("ix_lineage_parent", "lineage")
    op.drop_table("lineage")
