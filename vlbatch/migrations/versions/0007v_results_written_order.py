"""results in write order: items.written_seq and jobs.results_written, so results page without skipping items
that finish out of seq order

Revision ID: 0007v
Revises: 0007u
"""

import sqlalchemy as sa
from alembic import op

revision = "0007v"
down_revision = "0007u"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("results_written", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("items", sa.Column("written_seq", sa.BigInteger(), nullable=True))
    # Items finished before this revision keep their seq as their position; the next ones come after the last.
    op.execute("UPDATE items SET written_seq = seq WHERE status IN ('succeeded', 'failed')")
    op.execute(
        "UPDATE jobs SET results_written = COALESCE((SELECT MAX(items.written_seq) + 1 FROM items "
        "WHERE items.job_id = jobs.id), 0)"
    )
    op.create_index("ix_items_job_written_seq", "items", ["job_id", "written_seq"])


def downgrade() -> None:
    op.drop_index("ix_items_job_written_seq", table_name="items")
    op.drop_column("items", "written_seq")
    op.drop_column("jobs", "results_written")
