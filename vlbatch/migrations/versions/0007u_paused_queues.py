"""paused queues: a model and priority whose chunks no worker claims until it is resumed

Revision ID: 0007u
Revises: 0007t
"""

import sqlalchemy as sa
from alembic import op

revision = "0007u"
down_revision = "0007t"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "paused_queues",
        sa.Column("model", sa.String(256), primary_key=True),
        sa.Column("priority", sa.String(16), primary_key=True),
        sa.Column("paused_by", sa.String(200), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("paused_queues")
