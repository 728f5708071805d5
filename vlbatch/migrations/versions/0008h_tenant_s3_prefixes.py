"""tenant object-store prefixes: the s3:// prefixes a tenant's jobs may read, beside its local roots

Revision ID: 0008h
Revises: 0008c
"""

import sqlalchemy as sa
from alembic import op

revision = "0008h"
down_revision = "0008c"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL: none of its own (the global VLBATCH_ALLOWED_S3_PREFIXES, or none with VLBATCH_TENANT_ROOTS_REQUIRED).
    op.add_column("tenant_roots", sa.Column("s3_prefixes", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenant_roots") as batch:
        batch.drop_column("s3_prefixes")
