"""job energy: watt-hours booked to a job by the workers that ran it, and the tokens whose energy is unknown

Revision ID: 0005g
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005g"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL energy_wh: no interval of the job had a known power figure (unknown, not zero).
    op.add_column("jobs", sa.Column("energy_wh", sa.Float(), nullable=True))
    op.add_column(
        "jobs", sa.Column("energy_unmetered_tokens", sa.BigInteger(), nullable=False, server_default=sa.text("0"))
    )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("energy_unmetered_tokens")
        batch.drop_column("energy_wh")
