"""duplicates run once: results.content_hash (the item's image bytes) with its index, and results.reused_from

Revision ID: 0008b
Revises: 0007v
"""

import sqlalchemy as sa
from alembic import op

revision = "0008b"
down_revision = "0007v"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("results", sa.Column("content_hash", sa.String(length=64), nullable=True))
    op.add_column("results", sa.Column("reused_from", sa.Integer(), nullable=True))
    op.create_index("ix_results_content_hash", "results", ["content_hash"])


def downgrade() -> None:
    op.drop_index("ix_results_content_hash", table_name="results")
    op.drop_column("results", "reused_from")
    op.drop_column("results", "content_hash")
