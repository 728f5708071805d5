"""A tenant's webhook endpoints as the API and the commands manage them: create (the secret is shown once), change,
rotate the secret, delete, ping, list deliveries with their attempts, redeliver. Each function checks, writes through
``vlbatch.db.webhooks`` and commits; a refusal is a ``JobRefused`` with its registered code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from jobs.refusals import JobRefused
from jobs.webhooks import checked_events, checked_url
from vlbatch.db import webhooks
from vlbatch.db.webhook_tables import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from vlbatch.errors import WEBHOOK_DELIVERY_NOT_FOUND, WEBHOOK_ENDPOINT_DISABLED, WEBHOOK_NOT_FOUND
from vlbatch.settings import Settings


def create(
    session: Session, settings: Settings, *, tenant: str, url: str, events: Sequence[str], description: str | None
) -> WebhookEndpoint:
    wanted = checked_events(events)  # before the URL, whose check may wait on a name lookup
    row = webhooks.create_endpoint(
        session, tenant=tenant, url=checked_url(settings, url), events=wanted, description=description
    )
    session.commit()
    return row


def found(session: Session, *, scope: str | None, endpoint_id: str) -> WebhookEndpoint:
    row = webhooks.get_endpoint(session, scope=scope, endpoint_id=endpoint_id)
    if row is None:
        raise JobRefused(WEBHOOK_NOT_FOUND, f"webhook endpoint '{endpoint_id}' not found")
    return row


def listed(session: Session, *, scope: str | None) -> list[WebhookEndpoint]:
    return webhooks.list_endpoints(session, scope=scope)


def update(
    session: Session,
    settings: Settings,
    *,
    row: WebhookEndpoint,
    url: str | None,
    events: Sequence[str] | None,
    description: str | None,
    enabled: bool | None,
) -> WebhookEndpoint:
    webhooks.update_endpoint(
        session,
        row=row,
        url=None if url is None else checked_url(settings, url),
        events=None if events is None else checked_events(events),
        description=description,
        enabled=enabled,
    )
    session.commit()
    return row


def rotate(session: Session, *, row: WebhookEndpoint) -> str:
    secret = webhooks.rotate_secret(session, row=row)
    session.commit()
    return secret


def delete(session: Session, *, row: WebhookEndpoint) -> None:
    webhooks.delete_endpoint(session, row=row)
    session.commit()


def _retry_for(settings: Settings) -> timedelta:
    return timedelta(seconds=settings.webhooks.webhook_retry_for_s)


def _refuse_disabled(row: WebhookEndpoint) -> None:
    if not row.enabled:
        raise JobRefused(WEBHOOK_ENDPOINT_DISABLED, f"endpoint '{row.id}' is disabled: {row.disabled_reason}")


def ping(session: Session, settings: Settings, *, row: WebhookEndpoint) -> WebhookDelivery:
    """A ``ping`` delivery, due now; the sender sends it like any event."""
    _refuse_disabled(row)
    delivery = webhooks.ping(session, endpoint=row, retry_for=_retry_for(settings))
    session.commit()
    return delivery


@dataclass(frozen=True)
class DeliveryView:
    delivery: WebhookDelivery
    attempts: list[WebhookAttempt]


def deliveries(session: Session, *, row: WebhookEndpoint, limit: int, status: str | None) -> list[DeliveryView]:
    rows = webhooks.list_deliveries(session, endpoint_id=row.id, limit=limit, status=status)
    tries = webhooks.attempts_of(session, delivery_ids=[d.id for d in rows])
    return [DeliveryView(d, tries[d.id]) for d in rows]


def delivery(session: Session, *, row: WebhookEndpoint, delivery_id: str) -> DeliveryView:
    d = webhooks.get_delivery(session, endpoint_id=row.id, delivery_id=delivery_id)
    if d is None:
        raise JobRefused(WEBHOOK_DELIVERY_NOT_FOUND, f"delivery '{delivery_id}' of endpoint '{row.id}' not found")
    return DeliveryView(d, webhooks.attempts_of(session, delivery_ids=[d.id])[d.id])


def redeliver(session: Session, settings: Settings, *, row: WebhookEndpoint, delivery_id: str) -> DeliveryView:
    """Send a delivery again now, whatever it came to (its ``webhook-id`` and its attempts kept)."""
    _refuse_disabled(row)
    view = delivery(session, row=row, delivery_id=delivery_id)
    webhooks.redeliver(session, delivery=view.delivery, retry_for=_retry_for(settings))
    session.commit()
    return view
