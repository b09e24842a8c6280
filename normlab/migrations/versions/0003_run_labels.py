"""Runs get a name, a markdown note and tags (a table of their own, so a tag search uses an index)."""

import sqlalchemy as sa
from alembic import op

revision = "0003_run_labels"
down_revision = "0002_groups"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("name", sa.String(200)))
    op.add_column("runs", sa.Column("note", sa.Text))
    op.create_table(
        "run_tags",
        sa.Column("run_id", sa.String(32), primary_key=True),
        sa.Column("tag", sa.String(64), primary_key=True),
    )
    op.create_index("ix_run_tags_tag", "run_tags", ["tag"])


def downgrade() -> None:
    op.drop_index("ix_run_tags_tag", "run_tags")
    op.drop_table("run_tags")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("note")
        batch.drop_column("name")
