"""Merge the parallel 0005 revisions (idempotency hash, API keys and tenants, chunk sends, files and batches,
job energy) into one line again.

Revision ID: 0006
Revises: 0005c, 0005d, 0005e, 0005f, 0005g
"""

from __future__ import annotations

revision = "0006"
down_revision = ("0005c", "0005d", "0005e", "0005f", "0005g")
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing to change: the merge only joins the branches."""


def downgrade() -> None:
    """Nothing to change: the merge only joins the branches."""
