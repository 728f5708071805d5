"""engine samples: occupancy and feeder counters per worker over time

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "engine_samples",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("worker", sa.String(length=128), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("running_sum", sa.Integer(), nullable=False),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("mean_running", sa.Float(), nullable=True),
        sa.Column("backlog", sa.Integer(), nullable=False),
        sa.Column("items_done", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("prep_images", sa.Integer(), nullable=False),
        sa.Column("prep_seconds", sa.Float(), nullable=False),
        sa.Column("db_items", sa.Integer(), nullable=False),
        sa.Column("db_seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_engine_samples_worker_at", "engine_samples", ["worker", "sampled_at"])


def downgrade() -> None:
    op.drop_index("ix_engine_samples_worker_at", table_name="engine_samples")
    op.drop_table("engine_samples")
