"""chunk sends: how many times a chunk was sent since it was last claimed (the reconciler's back-off)

Revision ID: 0005e
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005e"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("chunks", sa.Column("sends", sa.Integer(), nullable=False, server_default=sa.text("0")))


def downgrade() -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.drop_column("sends")
