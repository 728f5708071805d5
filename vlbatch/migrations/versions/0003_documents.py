"""document jobs: intermediate parts, job templates, inbox file hashes, a job's output folder

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("output_dir", sa.String(length=1024), nullable=True))
    op.create_table(
        "document_parts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.String(length=16), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("pages", sa.JSON(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output", sa.JSON(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["item_id"], ["items.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("item_id", "stage", "idx", name="uq_document_parts_item_stage_idx"),
    )
    op.create_index("ix_document_parts_item_id", "document_parts", ["item_id"])
    op.create_table(
        "job_templates",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("inbox", sa.String(length=1024), nullable=False),
        sa.Column("pipeline", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("cron", sa.String(length=128), nullable=False),
        sa.Column("output_dir", sa.String(length=1024), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "inbox_files",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("template_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=True),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["template_id"], ["job_templates.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("template_id", "path", name="uq_inbox_files_template_path"),
    )
    op.create_index("ix_inbox_files_template_id", "inbox_files", ["template_id"])


def downgrade() -> None:
    op.drop_index("ix_inbox_files_template_id", table_name="inbox_files")
    op.drop_table("inbox_files")
    op.drop_table("job_templates")
    op.drop_index("ix_document_parts_item_id", table_name="document_parts")
    op.drop_table("document_parts")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("output_dir")
