"""items by job in seq order: an export reads a job's items in seq order through this index, so its rows stream from
the first one (no sort of the whole job's rows before the first byte) and the reader's work overlaps the server's

Revision ID: 0010a
Revises: 0009b
"""

from alembic import op

revision = "0010a"
down_revision = "0009b"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_items_job_seq", "items", ["job_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_items_job_seq", table_name="items")
