"""The retention tables: each tenant's own retention, and the lease that lets one janitor pass run at a time.

Read and written by ``vlbatch.db.retention``. Kept apart from ``models`` (which they extend: the same ``Base``), as
the webhook tables are.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, String
from sqlalchemy.orm import Mapped, mapped_column

from vlbatch.db.models import Base, utcnow


class TenantRetention(Base):
    """A tenant's own retention, set by an admin with ``vlbatch keys retention``: seconds its ended jobs (with their
    items and results) and its files are kept. NULL: the ``VLBATCH_RETENTION_*`` default; 0: kept for ever."""

    __tablename__ = "tenant_retention"

    tenant: Mapped[str] = mapped_column(String(128), primary_key=True)
    jobs_s: Mapped[int | None] = mapped_column(BigInteger)
    files_s: Mapped[int | None] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class JanitorLease(Base):
    """The one janitor pass across hosts: whoever holds the unexpired lease row sweeps (``vlbatch.db.retention``)."""

    __tablename__ = "janitor_leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(200))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
