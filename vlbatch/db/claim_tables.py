"""The claim counters' tables: each tenant's claims on a queue, and each job's claims, per time bucket.

Fair shares (``claim_order``) read them, and each claim bumps them (``claim_counts``), so a claim's read is bounded by
tenants (or recently claimed jobs) times the window's buckets, not by the queue. Kept apart from ``models`` (which
they extend: the same ``Base``), as the webhook tables are.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from vlbatch.db.models import Base


class TenantClaim(Base):
    """A tenant's claims on a queue (model, priority) within one time bucket: fair shares sum a window of them,
    a read bounded by tenants and buckets, not by the queue's jobs (``claim_counts``)."""

    __tablename__ = "tenant_claims"

    model: Mapped[str] = mapped_column(String(256), primary_key=True)
    priority: Mapped[str] = mapped_column(String(16), primary_key=True)
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # the bucket's start, unix seconds
    tenant: Mapped[str] = mapped_column(String(128), primary_key=True)
    n: Mapped[int] = mapped_column(Integer, default=0)


class JobClaim(Base):
    """A job's claims within one time bucket: within a tenant, the job with the fewest recent claims goes first."""

    __tablename__ = "job_claims"
    __table_args__ = (Index("ix_job_claims_bucket", "bucket"),)

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    n: Mapped[int] = mapped_column(Integer, default=0)
