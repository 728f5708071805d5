"""results.prompt_hash: sha256 of the prompt text the engine answered (a result's provenance)

Revision ID: 0009a
Revises: 0009d
"""

import sqlalchemy as sa
from alembic import op

revision = "0009a"
down_revision = "0009d"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL for the results written before: their prompt is not known any more.
    op.add_column("results", sa.Column("prompt_hash", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.drop_column("prompt_hash")
