"""engine samples keep a worker's claims apart from its result writes: the claims' count, wall and CPU seconds, so
``db_seconds`` is the writes' and chunk finishes' time alone (what ``vlbatch_db_write_seconds`` says it is)

Revision ID: 0010b
Revises: 0010a
"""

import sqlalchemy as sa
from alembic import op

revision = "0010b"
down_revision = "0010a"
branch_labels = None
depends_on = None

_COLUMNS = (("claims", sa.Integer()), ("claim_seconds", sa.Float()), ("claim_cpu_seconds", sa.Float()))


def upgrade() -> None:
    for name, type_ in _COLUMNS:
        op.add_column("engine_samples", sa.Column(name, type_, nullable=False, server_default=sa.text("0")))


def downgrade() -> None:
    with op.batch_alter_table("engine_samples") as batch:
        for name, _type in _COLUMNS:
            batch.drop_column(name)
