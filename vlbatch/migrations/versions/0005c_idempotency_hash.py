"""jobs.idempotency_hash: what a request with an Idempotency-Key asked for (route and body), so a reuse of the key
with another request is refused rather than answered with the old job

Revision ID: 0005c
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005c"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL: a job made without a key, or before the hash was kept (a replay of it is not compared).
    op.add_column("jobs", sa.Column("idempotency_hash", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("idempotency_hash")
