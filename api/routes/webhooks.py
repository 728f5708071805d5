"""Webhook endpoints of the caller's tenant (an admin's requests reach every tenant's): create (the signing secret is in
this answer only), list, get, change, delete, rotate the secret, ping, list deliveries with every attempt, redeliver.
Thin: the rules are ``jobs.webhook_endpoints`` and ``jobs.webhooks``; signing and sending are the sender's."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from api.deps import PrincipalDep, SessionClosingRoute, SessionDep, SettingsDep
from api.http_errors import errors
from jobs import webhook_endpoints as service
from vlbatch.db.webhook_tables import WebhookEndpoint
from vlbatch.db.webhooks import EVENTS
from vlbatch.errors import (
    INVALID_WEBHOOK,
    WEBHOOK_DELIVERY_NOT_FOUND,
    WEBHOOK_ENDPOINT_DISABLED,
    WEBHOOK_NOT_FOUND,
    WEBHOOK_URL_REFUSED,
)

router = APIRouter(route_class=SessionClosingRoute, prefix="/v1/webhooks", tags=["webhooks"])
EVENTS_HELP = "Events the endpoint receives: " + ", ".join(EVENTS) + "."


class WebhookCreate(BaseModel):
    url: str = Field(max_length=2048, description="Where deliveries are POSTed (http or https, a public address).")
    events: list[str] = Field(min_length=1, max_length=len(EVENTS), description=EVENTS_HELP)
    description: str | None = Field(None, max_length=512)


class WebhookUpdate(BaseModel):
    url: str | None = Field(None, max_length=2048)
    events: list[str] | None = Field(None, min_length=1, max_length=len(EVENTS), description=EVENTS_HELP)
    description: str | None = Field(None, max_length=512)
    enabled: bool | None = Field(None, description="true enables a disabled endpoint again (its failures forgotten).")


class WebhookOut(BaseModel):
    id: str
    object: Literal["webhook_endpoint"] = "webhook_endpoint"
    url: str
    events: list[str]
    description: str | None
    enabled: bool
    disabled_reason: str | None
    failing_since: datetime | None
    created_at: datetime
    secret: str | None = Field(None, description="The signing secret: in the answer to create and rotate only.")


class WebhookList(BaseModel):
    object: Literal["list"] = "list"
    data: list[WebhookOut]


class SecretOut(BaseModel):
    id: str
    secret: str


class AttemptOut(BaseModel):
    attempted_at: datetime
    status_code: int | None
    latency_ms: int
    error_code: str | None
    error_message: str | None


class DeliveryOut(BaseModel):
    id: str = Field(description="The webhook-id header, the same on every attempt.")
    event: str
    status: str = Field(description="pending, delivered or failed.")
    attempts: list[AttemptOut]
    next_attempt_at: datetime | None
    last_error: str | None
    created_at: datetime
    ended_at: datetime | None
    payload: dict[str, object]


class DeliveryList(BaseModel):
    object: Literal["list"] = "list"
    data: list[DeliveryOut]


def endpoint_out(row: WebhookEndpoint, *, secret: str | None = None) -> WebhookOut:
    return WebhookOut(
        id=row.id,
        url=row.url,
        events=list(row.events),
        description=row.description,
        enabled=row.enabled,
        disabled_reason=row.disabled_reason,
        failing_since=row.failing_since,
        created_at=row.created_at,
        secret=secret,
    )


def delivery_out(view: service.DeliveryView) -> DeliveryOut:
    d = view.delivery
    return DeliveryOut(
        id=d.id,
        event=d.event,
        status=d.status,
        attempts=[
            AttemptOut(
                attempted_at=a.attempted_at,
                status_code=a.status_code,
                latency_ms=a.latency_ms,
                error_code=a.error_code,
                error_message=a.error_message,
            )
            for a in view.attempts
        ],
        next_attempt_at=d.next_attempt_at if d.status == "pending" else None,
        last_error=d.last_error,
        created_at=d.created_at,
        ended_at=d.ended_at,
        payload=d.payload,
    )


@router.post("", status_code=201, responses=errors(INVALID_WEBHOOK, WEBHOOK_URL_REFUSED))
def create_webhook(
    body: WebhookCreate, session: SessionDep, settings: SettingsDep, principal: PrincipalDep
) -> WebhookOut:
    row = service.create(
        session, settings, tenant=principal.tenant, url=body.url, events=body.events, description=body.description
    )
    return endpoint_out(row, secret=row.secret)


@router.get("")
def list_webhooks(session: SessionDep, principal: PrincipalDep) -> WebhookList:
    return WebhookList(data=[endpoint_out(r) for r in service.listed(session, scope=principal.scope)])


@router.get("/{endpoint_id}", responses=errors(WEBHOOK_NOT_FOUND))
def get_webhook(endpoint_id: str, session: SessionDep, principal: PrincipalDep) -> WebhookOut:
    return endpoint_out(service.found(session, scope=principal.scope, endpoint_id=endpoint_id))


@router.patch("/{endpoint_id}", responses=errors(WEBHOOK_NOT_FOUND, INVALID_WEBHOOK, WEBHOOK_URL_REFUSED))
def update_webhook(
    endpoint_id: str, body: WebhookUpdate, session: SessionDep, settings: SettingsDep, principal: PrincipalDep
) -> WebhookOut:
    row = service.found(session, scope=principal.scope, endpoint_id=endpoint_id)
    service.update(
        session,
        settings,
        row=row,
        url=body.url,
        events=body.events,
        description=body.description,
        enabled=body.enabled,
    )
    return endpoint_out(row)


@router.delete("/{endpoint_id}", status_code=204, responses=errors(WEBHOOK_NOT_FOUND))
def delete_webhook(endpoint_id: str, session: SessionDep, principal: PrincipalDep) -> Response:
    service.delete(session, row=service.found(session, scope=principal.scope, endpoint_id=endpoint_id))
    return Response(status_code=204)


@router.post("/{endpoint_id}/rotate-secret", responses=errors(WEBHOOK_NOT_FOUND))
def rotate_secret(endpoint_id: str, session: SessionDep, principal: PrincipalDep) -> SecretOut:
    row = service.found(session, scope=principal.scope, endpoint_id=endpoint_id)
    return SecretOut(id=row.id, secret=service.rotate(session, row=row))


@router.post("/{endpoint_id}/ping", status_code=202, responses=errors(WEBHOOK_NOT_FOUND, WEBHOOK_ENDPOINT_DISABLED))
def ping_webhook(endpoint_id: str, session: SessionDep, settings: SettingsDep, principal: PrincipalDep) -> DeliveryOut:
    row = service.found(session, scope=principal.scope, endpoint_id=endpoint_id)
    d = service.ping(session, settings, row=row)
    return delivery_out(service.DeliveryView(d, []))


@router.get("/{endpoint_id}/deliveries", responses=errors(WEBHOOK_NOT_FOUND))
def list_deliveries(
    endpoint_id: str,
    session: SessionDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    status: Literal["pending", "delivered", "failed"] | None = None,
) -> DeliveryList:
    row = service.found(session, scope=principal.scope, endpoint_id=endpoint_id)
    return DeliveryList(
        data=[delivery_out(v) for v in service.deliveries(session, row=row, limit=limit, status=status)]
    )


@router.get("/{endpoint_id}/deliveries/{delivery_id}", responses=errors(WEBHOOK_NOT_FOUND, WEBHOOK_DELIVERY_NOT_FOUND))
def get_delivery(endpoint_id: str, delivery_id: str, session: SessionDep, principal: PrincipalDep) -> DeliveryOut:
    row = service.found(session, scope=principal.scope, endpoint_id=endpoint_id)
    return delivery_out(service.delivery(session, row=row, delivery_id=delivery_id))


@router.post(
    "/{endpoint_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    responses=errors(WEBHOOK_NOT_FOUND, WEBHOOK_DELIVERY_NOT_FOUND, WEBHOOK_ENDPOINT_DISABLED),
)
def redeliver(
    endpoint_id: str, delivery_id: str, session: SessionDep, settings: SettingsDep, principal: PrincipalDep
) -> DeliveryOut:
    row = service.found(session, scope=principal.scope, endpoint_id=endpoint_id)
    return delivery_out(service.redeliver(session, settings, row=row, delivery_id=delivery_id))
