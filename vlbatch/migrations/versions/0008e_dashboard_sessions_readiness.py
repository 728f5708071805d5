"""dashboard sessions (a random session id per login, kept server-side so logout and key revocation end it) and
the row /readyz rewrites to prove the database takes writes

Revision ID: 0008e
Revises: 0008b
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0008e"
down_revision = "0008b"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dashboard_sessions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("key_id", sa.Integer, sa.ForeignKey("api_keys.id", ondelete="CASCADE"), nullable=False, index=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    probes = op.create_table(
        "readiness_probes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("probes", sa.BigInteger, nullable=False),
        sa.Column("probed_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.bulk_insert(probes, [{"id": 1, "probes": 0, "probed_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.drop_table("readiness_probes")
    op.drop_table("dashboard_sessions")
