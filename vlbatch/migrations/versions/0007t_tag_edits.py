"""tag edits: an operator's added and removed tags per item, and each result's merged tags with their sources

Revision ID: 0007t
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007t"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL for the results written before: readers take the tags of their output, all from the model.
    op.add_column("results", sa.Column("tags", sa.JSON(), nullable=True))
    op.create_table(
        "tag_edits",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("item_id", sa.Integer(), sa.ForeignKey("items.id", ondelete="CASCADE"), nullable=False),
        sa.Column("tag", sa.String(200), nullable=False),
        sa.Column("added", sa.Boolean(), nullable=False),
        sa.Column("author", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("item_id", "tag", name="uq_tag_edits_item_tag"),
    )
    op.create_index("ix_tag_edits_item_id", "tag_edits", ["item_id"])


def downgrade() -> None:
    op.drop_index("ix_tag_edits_item_id", table_name="tag_edits")
    op.drop_table("tag_edits")
    with op.batch_alter_table("results") as batch:
        batch.drop_column("tags")
