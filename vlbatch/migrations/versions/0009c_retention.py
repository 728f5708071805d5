"""retention: job and file expiry, a batch's output expiry, tenants' own retention, the janitor's lease

Revision ID: 0009c
Revises: 0008h
"""

import sqlalchemy as sa
from alembic import op

revision = "0009c"
down_revision = "0008h"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("files", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("batches", sa.Column("output_expires_after_s", sa.Integer(), nullable=True))
    # The janitor looks ended jobs up by tenant and end time, and files by tenant and age.
    op.create_index("ix_jobs_status_finished_at", "jobs", ["status", "finished_at"])
    op.create_index("ix_files_created_at", "files", ["created_at"])
    op.create_index("ix_batches_job_id", "batches", ["job_id"])
    op.create_table(
        "tenant_retention",
        sa.Column("tenant", sa.String(128), primary_key=True),
        sa.Column("jobs_s", sa.BigInteger(), nullable=True),
        sa.Column("files_s", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "janitor_leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("janitor_leases")
    op.drop_table("tenant_retention")
    op.drop_index("ix_batches_job_id", table_name="batches")
    op.drop_index("ix_files_created_at", table_name="files")
    op.drop_index("ix_jobs_status_finished_at", table_name="jobs")
    with op.batch_alter_table("batches") as batch:
        batch.drop_column("output_expires_after_s")
    with op.batch_alter_table("files") as batch:
        batch.drop_column("expires_at")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("expires_at")
