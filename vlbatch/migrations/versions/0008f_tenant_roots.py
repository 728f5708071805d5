"""tenant_roots: each tenant's input and output folders, inside the global VLBATCH_ALLOWED_INPUT_ROOTS;
an index on engine_samples (model, sampled_at) (the column comes with 0008g): a job for a model no live worker
serves is told so

Revision ID: 0008f
Revises: 0008g
"""

import sqlalchemy as sa
from alembic import op

revision = "0008f"
down_revision = "0008g"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_roots",
        sa.Column("tenant", sa.String(128), primary_key=True),
        sa.Column("input_roots", sa.JSON(), nullable=False),
        sa.Column("output_roots", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_engine_samples_model_at", "engine_samples", ["model", "sampled_at"])


def downgrade() -> None:
    op.drop_index("ix_engine_samples_model_at", table_name="engine_samples")
    op.drop_table("tenant_roots")
