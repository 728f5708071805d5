"""device telemetry samples

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "device_telemetry",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("chunk_id", sa.Integer(), nullable=True),
        sa.Column("worker", sa.String(length=128), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("npu_id", sa.Integer(), nullable=True),
        sa.Column("temp_c", sa.Float(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("memory_used_mb", sa.Integer(), nullable=True),
        sa.Column("memory_total_mb", sa.Integer(), nullable=True),
        sa.Column("aicore_pct", sa.Float(), nullable=True),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("device_telemetry", schema=None) as batch_op:
        batch_op.create_index("ix_device_telemetry_job_sampled", ["job_id", "sampled_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_device_telemetry_sampled_at"), ["sampled_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("device_telemetry", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_device_telemetry_sampled_at"))
        batch_op.drop_index("ix_device_telemetry_job_sampled")

    op.drop_table("device_telemetry")
