"""engine states: each worker's engine as its breaker sees it (ok, or broken with the reason and since when)

Revision ID: 0008c
Revises: 0008f
"""

import sqlalchemy as sa
from alembic import op

revision = "0008c"
down_revision = "0008f"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "engine_states",
        sa.Column("owner", sa.String(200), primary_key=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_engine_states_model", "engine_states", ["model"])


def downgrade() -> None:
    op.drop_index("ix_engine_states_model", table_name="engine_states")
    op.drop_table("engine_states")
