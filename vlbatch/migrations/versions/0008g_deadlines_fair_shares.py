"""deadlines and fair shares: a job's deadline, when each chunk was last claimed, the model a worker's engine
samples are for

Revision ID: 0008g
Revises: 0008e
"""

import sqlalchemy as sa
from alembic import op

revision = "0008g"
down_revision = "0008e"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("deadline", sa.DateTime(timezone=True), nullable=True))
    op.add_column("chunks", sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True))
    # The claim's two reads: a job's first free chunk, and its chunks claimed since a time.
    op.create_index("ix_chunks_job_done_seq", "chunks", ["job_id", "done", "seq"])
    op.create_index("ix_chunks_job_claimed_at", "chunks", ["job_id", "claimed_at"])
    op.add_column("engine_samples", sa.Column("model", sa.String(256), nullable=True))


def downgrade() -> None:
    op.drop_column("engine_samples", "model")
    op.drop_index("ix_chunks_job_claimed_at", table_name="chunks")
    op.drop_index("ix_chunks_job_done_seq", table_name="chunks")
    op.drop_column("chunks", "claimed_at")
    op.drop_column("jobs", "deadline")
