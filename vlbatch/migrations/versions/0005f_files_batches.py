"""files and batches: the OpenAI-compatible Files and Batches API

Revision ID: 0005f
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005f"
down_revision = "0004"
branch_labels = None
depends_on = None


def _stamp(name: str) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=True)


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False, server_default="default"),
        sa.Column("filename", sa.String(length=512), nullable=False),
        sa.Column("purpose", sa.String(length=32), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("stored_as", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_files_tenant", "files", ["tenant"])
    op.create_table(
        "batches",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False, server_default="default"),
        sa.Column("endpoint", sa.String(length=64), nullable=False),
        sa.Column("input_file_id", sa.String(length=40), nullable=False),
        sa.Column("completion_window", sa.String(length=8), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.String(length=32), sa.ForeignKey("jobs.id", ondelete="SET NULL"), nullable=True),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=True),
        sa.Column("errors", sa.JSON(), nullable=False),
        sa.Column("invalid_lines", sa.Integer(), nullable=False),
        sa.Column("output_file_id", sa.String(length=40), nullable=True),
        sa.Column("error_file_id", sa.String(length=40), nullable=True),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        *(
            _stamp(n)
            for n in (
                "expires_at",
                "in_progress_at",
                "finalizing_at",
                "completed_at",
                "failed_at",
                "expired_at",
                "cancelling_at",
                "cancelled_at",
            )
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_batches_tenant", "batches", ["tenant"])


def downgrade() -> None:
    op.drop_index("ix_batches_tenant", table_name="batches")
    op.drop_table("batches")
    op.drop_index("ix_files_tenant", table_name="files")
    op.drop_table("files")
