"""API keys and tenants: api_keys, a tenant on jobs and job templates, Idempotency-Keys per tenant

Revision ID: 0005d
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005d"
down_revision = "0004"
branch_labels = None
depends_on = None

# Rows made before tenants existed belong to the tenant of keyless use (vlbatch.db.models.DEFAULT_TENANT).
DEFAULT_TENANT = "default"
# 0001 left the jobs.idempotency_key unique constraint unnamed; in SQLite's batch mode this names it for the drop.
NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def _old_unique_name() -> str:
    return "jobs_idempotency_key_key" if op.get_bind().dialect.name == "postgresql" else "uq_jobs_idempotency_key"


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=True),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("secret_hash", name="uq_api_keys_secret_hash"),
    )
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant"])
    with op.batch_alter_table("jobs", naming_convention=NAMING) as batch_op:
        batch_op.add_column(sa.Column("tenant", sa.String(length=128), nullable=False, server_default=DEFAULT_TENANT))
        batch_op.drop_constraint(_old_unique_name(), type_="unique")
        batch_op.create_unique_constraint("uq_jobs_tenant_idempotency_key", ["tenant", "idempotency_key"])
        batch_op.create_index("ix_jobs_tenant", ["tenant"])
    with op.batch_alter_table("job_templates") as batch_op:
        batch_op.add_column(sa.Column("tenant", sa.String(length=128), nullable=False, server_default=DEFAULT_TENANT))


def downgrade() -> None:
    with op.batch_alter_table("job_templates") as batch_op:
        batch_op.drop_column("tenant")
    with op.batch_alter_table("jobs", naming_convention=NAMING) as batch_op:
        batch_op.drop_index("ix_jobs_tenant")
        batch_op.drop_constraint("uq_jobs_tenant_idempotency_key", type_="unique")
        batch_op.create_unique_constraint(_old_unique_name(), ["idempotency_key"])
        batch_op.drop_column("tenant")
    op.drop_index("ix_api_keys_tenant", table_name="api_keys")
    op.drop_table("api_keys")
