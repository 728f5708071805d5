"""claim counters: each tenant's and job's claims per time bucket, and partial indexes on active jobs, so a claim
reads a bounded amount however many jobs are queued; and the CPU a worker's database work takes, per engine sample

Revision ID: 0009d
Revises: 0009c
"""

import sqlalchemy as sa
from alembic import op

revision = "0009d"
down_revision = "0009c"
branch_labels = None
depends_on = None

# As vlbatch.db.models.ACTIVE_JOBS_SQL: the claim's queries name the same literals.
ACTIVE = "status IN ('queued', 'running')"


def upgrade() -> None:
    # Empty at first: fair shares start even after the upgrade, as a window's claims age out anyway.
    op.create_table(
        "tenant_claims",
        sa.Column("model", sa.String(256), primary_key=True),
        sa.Column("priority", sa.String(16), primary_key=True),
        sa.Column("bucket", sa.BigInteger, primary_key=True),
        sa.Column("tenant", sa.String(128), primary_key=True),
        sa.Column("n", sa.Integer, nullable=False),
    )
    op.create_table(
        "job_claims",
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("bucket", sa.BigInteger, primary_key=True),
        sa.Column("n", sa.Integer, nullable=False),
    )
    op.create_index("ix_job_claims_bucket", "job_claims", ["bucket"])
    op.create_index(
        "ix_jobs_active_tenant_order",
        "jobs",
        ["model", "priority", "tenant", "deadline", "created_at", "id"],
        postgresql_where=sa.text(ACTIVE),
        sqlite_where=sa.text(ACTIVE),
    )

    op.add_column(
        "engine_samples", sa.Column("db_cpu_seconds", sa.Float(), nullable=False, server_default=sa.text("0"))
    )


def downgrade() -> None:
    with op.batch_alter_table("engine_samples") as batch:
        batch.drop_column("db_cpu_seconds")
    op.drop_index("ix_jobs_active_tenant_order", table_name="jobs")
    op.drop_index("ix_job_claims_bucket", table_name="job_claims")
    op.drop_table("job_claims")
    op.drop_table("tenant_claims")
