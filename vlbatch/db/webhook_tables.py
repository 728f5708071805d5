"""The webhook tables: a tenant's endpoints, the deliveries owed to them (the outbox), and each delivery's attempts.

A delivery row is written in the transaction that ends a job or a batch (``vlbatch.db.webhooks``), so an event is
never lost between the state change and its sending; the sender (``jobs.webhooks``) claims due rows and records
every attempt. Kept apart from ``models`` (which it extends: the same ``Base``) so the core tables stay in one
readable module.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from vlbatch.db.models import Base, utcnow


class DeliveryStatus(enum.StrEnum):
    PENDING = "pending"  # due at ``next_attempt_at`` (a claimed one: once its claim lapses)
    DELIVERED = "delivered"  # a 2xx answer came
    FAILED = "failed"  # retried for VLBATCH_WEBHOOK_RETRY_FOR_S without a 2xx, or its endpoint was deleted/disabled


class WebhookEndpoint(Base):
    """A tenant's receiver: a URL, the events it wants, and the secret deliveries are signed with (Standard
    Webhooks' ``whsec_`` form; kept as it is, since signing needs it, and shown to the client only at creation
    and rotation)."""

    __tablename__ = "webhook_endpoints"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    url: Mapped[str] = mapped_column(String(2048))
    events: Mapped[list[Any]] = mapped_column(JSON)
    description: Mapped[str | None] = mapped_column(String(512))
    secret: Mapped[str] = mapped_column(String(128))
    enabled: Mapped[bool] = mapped_column(default=True)
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    # The first failed attempt since the last success: an endpoint failing for VLBATCH_WEBHOOK_DISABLE_AFTER_S
    # is disabled. NULL while its last attempt succeeded (or none was made).
    failing_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class WebhookDelivery(Base):
    """One event owed to one endpoint. ``id`` is the ``webhook-id`` header, the same on every attempt, so a
    receiver that got it twice (at least once) can tell."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_ended", "status", "ended_at"),
        Index("ix_webhook_deliveries_endpoint_created", "endpoint_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("webhook_endpoints.id", ondelete="CASCADE"))
    tenant: Mapped[str] = mapped_column(String(128))
    event: Mapped[str] = mapped_column(String(32))
    # The job or batch the event is about (None for a ping): retention keeps a job's results while it is owed.
    subject_id: Mapped[str | None] = mapped_column(String(40), index=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default=DeliveryStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Retried until then; NULL: VLBATCH_WEBHOOK_RETRY_FOR_S after ``created_at`` (the outbox, written where no
    # settings are read). A redelivery on demand sets it.
    give_up_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # delivered or failed


class WebhookAttempt(Base):
    """One try of a delivery: the answer's status (None when none came), how long it took, and why it failed."""

    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), index=True)
    attempted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    status_code: Mapped[int | None] = mapped_column(Integer)
    latency_ms: Mapped[int] = mapped_column(Integer, default=0)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    answer: Mapped[str | None] = mapped_column(Text)  # the first VLBATCH_WEBHOOK_MAX_ANSWER_BYTES of the body
