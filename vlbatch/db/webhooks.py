"""Webhook endpoints, the outbox of deliveries, and their attempts. Keyword-only arguments; no HTTP errors.

The outbox: ``job_ended``, ``job_event`` and ``batch_event`` are called by the statements that end a job or a batch
(``leases.finish_chunk``, ``job_store.cancel_job``, ``batches``), inside their transaction, and write one
``WebhookDelivery`` per endpoint of the tenant that wants the event. The event then exists exactly when the state
change does: a rollback takes both, a commit keeps both. The sender (``jobs.webhooks``) claims due deliveries
(``claim_due``: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, a compare-and-set on SQLite; a claim is a lease on
``next_attempt_at``, so a sender that dies mid-send leaves the delivery due again) and records every attempt.

Every lookup of an endpoint is scoped to the asking tenant, or to none for an admin (``scope`` None). A payload holds
ids, states, counts and links, never results.
"""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, delete, func, or_, select, update
from sqlalchemy.orm import Session

from vlbatch.db.models import Item, ItemStatus, Job, JobStatus, utcnow
from vlbatch.db.webhook_tables import DeliveryStatus, WebhookAttempt, WebhookDelivery, WebhookEndpoint

__all__ = [
    "BATCH_EVENTS",
    "EVENTS",
    "JOB_EVENTS",
    "Attempt",
    "batch_event",
    "claim_due",
    "create_endpoint",
    "delete_delivered_before",
    "job_ended",
    "job_event",
    "owed_subjects",
]

JOB_EVENTS = ("job.completed", "job.failed", "job.cancelled", "job.stalled")
BATCH_EVENTS = ("batch.completed", "batch.failed", "batch.expired", "batch.cancelled")
PING = "ping"
EVENTS = (*JOB_EVENTS, *BATCH_EVENTS, PING)
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """Standard Webhooks' secret form: ``whsec_`` and the base64 of 24 random bytes (the HMAC key)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def _scoped(stmt: Select[Any], scope: str | None) -> Select[Any]:
    return stmt if scope is None else stmt.where(WebhookEndpoint.tenant == scope)


# ----------------------------------------------------------------------------------------------- endpoints


def create_endpoint(
    session: Session, *, tenant: str, url: str, events: Sequence[str], description: str | None
) -> WebhookEndpoint:
    now = utcnow()
    row = WebhookEndpoint(
        id=f"we_{uuid.uuid4().hex}",
        tenant=tenant,
        url=url,
        events=list(events),
        description=description,
        secret=new_secret(),
        enabled=True,
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    session.flush()
    return row


def get_endpoint(session: Session, *, scope: str | None, endpoint_id: str) -> WebhookEndpoint | None:
    return session.scalars(_scoped(select(WebhookEndpoint).where(WebhookEndpoint.id == endpoint_id), scope)).first()


def list_endpoints(session: Session, *, scope: str | None) -> list[WebhookEndpoint]:
    stmt = _scoped(select(WebhookEndpoint), scope).order_by(WebhookEndpoint.created_at, WebhookEndpoint.id)
    return list(session.scalars(stmt))


def update_endpoint(
    session: Session,
    *,
    row: WebhookEndpoint,
    url: str | None = None,
    events: Sequence[str] | None = None,
    description: str | None = None,
    enabled: bool | None = None,
) -> WebhookEndpoint:
    """Change what is given. Enabling an endpoint clears the reason it was disabled and restarts its failure
    count; disabling one by hand gives a reason of its own."""
    if url is not None:
        row.url = url
    if events is not None:
        row.events = list(events)
    if description is not None:
        row.description = description
    if enabled is True and not row.enabled:
        row.enabled, row.disabled_reason, row.failing_since = True, None, None
    elif enabled is False and row.enabled:
        row.enabled, row.disabled_reason = False, "disabled by its owner"
    row.updated_at = utcnow()
    session.flush()
    return row


def rotate_secret(session: Session, *, row: WebhookEndpoint) -> str:
    """A new secret from now on; deliveries not yet sent are signed with it."""
    row.secret = new_secret()
    row.updated_at = utcnow()
    session.flush()
    return row.secret


def delete_endpoint(session: Session, *, row: WebhookEndpoint) -> None:
    """The endpoint and, with it (``ON DELETE CASCADE``), its deliveries and their attempts."""
    session.execute(delete(WebhookEndpoint).where(WebhookEndpoint.id == row.id))


# ----------------------------------------------------------------------------------------------- the outbox


def _counts(session: Session, job_id: str) -> dict[str, int]:
    counts = {s.value: 0 for s in ItemStatus}
    stmt = select(Item.status, func.count()).where(Item.job_id == job_id).group_by(Item.status)
    for status, n in session.execute(stmt):
        counts[status] = n
    return counts


def _wanting(session: Session, *, tenant: str, event: str) -> list[WebhookEndpoint]:
    """The tenant's enabled endpoints that asked for ``event`` (a tenant has a few: filtered here, not in SQL)."""
    rows = session.scalars(
        select(WebhookEndpoint).where(WebhookEndpoint.tenant == tenant, WebhookEndpoint.enabled.is_(True))
    )
    return [r for r in rows if event in (r.events or [])]


def _envelope(event: str, data: dict[str, Any]) -> dict[str, Any]:
    now = utcnow()
    return {"id": f"evt_{uuid.uuid4().hex}", "type": event, "timestamp": now.isoformat(), "data": data}


def enqueue(
    session: Session,
    *,
    endpoints: Iterable[WebhookEndpoint],
    event: str,
    subject_id: str | None,
    payload: dict[str, Any],
    retry_for: timedelta | None = None,
) -> list[WebhookDelivery]:
    """One pending delivery of ``payload`` per endpoint, due now, in the caller's transaction."""
    now = utcnow()
    rows = [
        WebhookDelivery(
            id=f"msg_{uuid.uuid4().hex}",
            endpoint_id=e.id,
            tenant=e.tenant,
            event=event,
            subject_id=subject_id,
            payload=payload,
            status=DeliveryStatus.PENDING,
            attempts=0,
            next_attempt_at=now,
            give_up_at=None if retry_for is None else now + retry_for,
            created_at=now,
        )
        for e in endpoints
    ]
    session.add_all(rows)
    if rows:
        session.flush()
    return rows


def _job_now(session: Session, job_id: str) -> Any:
    """The job's columns as the database holds them in this transaction: the caller has just changed them with a
    bulk UPDATE, which a ``Job`` already in the session would not show."""
    return session.execute(
        select(Job.id, Job.tenant, Job.status, Job.pipeline, Job.model).where(Job.id == job_id)
    ).one_or_none()


def job_event(session: Session, *, job_id: str, event: str, extra: dict[str, Any] | None = None) -> int:
    """Owe ``event`` about job ``job_id`` to every endpoint of its tenant that wants it. Returns how many."""
    job = _job_now(session, job_id)
    if job is None:
        return 0
    endpoints = _wanting(session, tenant=job.tenant, event=event)
    if not endpoints:  # the common case costs one indexed read, and no count of the job's items
        return 0
    counts = _counts(session, job_id)
    data = {
        "object": "job",
        "id": job.id,
        "status": job.status,
        "pipeline": job.pipeline,
        "model": job.model,
        "total": sum(counts.values()),
        "counts": {k: v for k, v in counts.items() if k in ("succeeded", "failed", "cancelled", "expired")},
        "links": {"job": f"/v1/jobs/{job.id}", "results": f"/v1/jobs/{job.id}/results"},
        **(extra or {}),
    }
    rows = enqueue(
        session,
        endpoints=endpoints,
        event=event,
        subject_id=job.id,
        payload=_envelope(event, data),
    )
    return len(rows)


# The open jobs one breaker can stall at once; more wait for the next time the model's breakers open.
STALLED_JOBS_PER_EVENT = 1000


def jobs_stalled(session: Session, *, model: str, reason: str) -> int:
    """Owe ``job.stalled`` (with ``reason``) for each open job of ``model``, to the endpoints that want it."""
    tenants = set(tenants_wanting(session, events=["job.stalled"]))
    if not tenants:
        return 0
    open_jobs = select(Job.id).where(
        Job.model == model, Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]), Job.tenant.in_(sorted(tenants))
    )
    ids = list(session.scalars(open_jobs.order_by(Job.created_at).limit(STALLED_JOBS_PER_EVENT)))
    return sum(job_event(session, job_id=j, event="job.stalled", extra={"stalled": reason}) for j in ids)


def job_ended(session: Session, *, job_id: str) -> int:
    """A job finished: ``job.failed`` when none of its items succeeded and some failed, ``job.completed``
    otherwise (its counts say how many failed)."""
    job = _job_now(session, job_id)
    if job is None or not any(_wanting(session, tenant=job.tenant, event=e) for e in ("job.completed", "job.failed")):
        return 0
    counts = _counts(session, job_id)
    failed = counts[ItemStatus.FAILED] + counts[ItemStatus.EXPIRED]
    event = "job.failed" if counts[ItemStatus.SUCCEEDED] == 0 and failed > 0 else "job.completed"
    return job_event(session, job_id=job_id, event=event)


def batch_event(session: Session, *, batch: Any, status: str, values: dict[str, Any] | None = None) -> int:
    """Owe ``batch.<status>`` about ``batch`` (a ``Batch`` row; ``values`` the columns its ending statement sets,
    which the row may not show yet) to every endpoint of its tenant that wants it."""
    event = f"batch.{status}"
    if event not in BATCH_EVENTS:
        return 0
    endpoints = _wanting(session, tenant=batch.tenant, event=event)
    if not endpoints:
        return 0
    v = {"output_file_id": batch.output_file_id, "error_file_id": batch.error_file_id, **(values or {})}
    counts = _counts(session, batch.job_id) if batch.job_id else {}
    failed = sum(counts.get(s, 0) for s in ("failed", "cancelled", "expired"))
    links = {"batch": f"/v1/batches/{batch.id}"}
    for key, name in (("output_file_id", "output"), ("error_file_id", "errors")):
        if v.get(key):
            links[name] = f"/v1/files/{v[key]}/content"
    data = {
        "object": "batch",
        "id": batch.id,
        "status": status,
        "job_id": batch.job_id,
        "request_counts": {
            "total": sum(counts.values()),
            "completed": counts.get("succeeded", 0),
            "failed": failed,
        },
        "output_file_id": v["output_file_id"],
        "error_file_id": v["error_file_id"],
        "links": links,
    }
    rows = enqueue(
        session,
        endpoints=endpoints,
        event=event,
        subject_id=batch.id,
        payload=_envelope(event, data),
    )
    return len(rows)


def ping(session: Session, *, endpoint: WebhookEndpoint, retry_for: timedelta) -> WebhookDelivery:
    data = {"object": "webhook_endpoint", "id": endpoint.id}
    return enqueue(
        session,
        endpoints=[endpoint],
        event=PING,
        subject_id=None,
        payload=_envelope(PING, data),
        retry_for=retry_for,
    )[0]


def tenants_wanting(session: Session, *, events: Sequence[str]) -> list[str]:
    """The tenants with an enabled endpoint that wants one of ``events``."""
    rows = session.execute(
        select(WebhookEndpoint.tenant, WebhookEndpoint.events).where(WebhookEndpoint.enabled.is_(True))
    )
    return sorted({tenant for tenant, wanted in rows if set(wanted or ()) & set(events)})


def owed_subjects(session: Session, *, subject_ids: Sequence[str]) -> set[str]:
    """Which of these jobs or batches still have a delivery pending: their results are kept until it ends."""
    if not subject_ids:
        return set()
    stmt = select(WebhookDelivery.subject_id).where(
        WebhookDelivery.subject_id.in_(list(subject_ids)), WebhookDelivery.status == DeliveryStatus.PENDING
    )
    return {s for s in session.scalars(stmt.distinct()) if s is not None}


# ----------------------------------------------------------------------------------------------- the sender


def claim_due(session: Session, *, now: datetime, lease: timedelta, limit: int) -> list[WebhookDelivery]:
    """Take up to ``limit`` due deliveries for this sender: each one's ``next_attempt_at`` moves ``lease`` on, so no
    other sender takes it meanwhile and one that dies leaves it due again. Commits nothing."""
    due = select(WebhookDelivery).where(
        WebhookDelivery.status == DeliveryStatus.PENDING, WebhookDelivery.next_attempt_at <= now
    )
    due = due.order_by(WebhookDelivery.next_attempt_at).limit(limit)
    if session.get_bind().dialect.name == "postgresql":
        rows = list(session.scalars(due.with_for_update(skip_locked=True)))
        for row in rows:
            row.next_attempt_at = now + lease
        session.flush()
        return rows
    claimed = []
    for row in session.scalars(due).all():
        # compare-and-set: only the sender that still sees the due time it read moves it
        res = session.execute(
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == row.id,
                WebhookDelivery.status == DeliveryStatus.PENDING,
                WebhookDelivery.next_attempt_at == row.next_attempt_at,
            )
            .values(next_attempt_at=now + lease)
            .execution_options(synchronize_session=False)
        )
        if res.rowcount:  # type: ignore[attr-defined]
            session.refresh(row)
            claimed.append(row)
    return claimed


@dataclass(frozen=True)
class Attempt:
    """What one try of a delivery came to: a 2xx (``ok``), or a status and/or an error code."""

    ok: bool
    status_code: int | None
    latency_ms: int
    error_code: str | None = None
    error_message: str | None = None
    answer: str | None = None


def record_attempt(
    session: Session,
    *,
    delivery: WebhookDelivery,
    attempt: Attempt,
    retry_at: datetime | None,
    disable_after: timedelta,
) -> None:
    """Keep ``attempt``; the delivery ends delivered (a 2xx), stays pending until ``retry_at``, or (``retry_at``
    None) ends failed. The endpoint's failure clock starts at its first failure since a success; once it has run
    ``disable_after`` the endpoint is disabled with the reason."""
    now = utcnow()
    session.add(
        WebhookAttempt(
            delivery_id=delivery.id,
            attempted_at=now,
            status_code=attempt.status_code,
            latency_ms=attempt.latency_ms,
            error_code=attempt.error_code,
            error_message=attempt.error_message,
            answer=attempt.answer,
        )
    )
    delivery.attempts += 1
    delivery.last_error = attempt.error_code
    if attempt.ok:
        delivery.status, delivery.ended_at = DeliveryStatus.DELIVERED, now
    elif retry_at is None:
        delivery.status, delivery.ended_at = DeliveryStatus.FAILED, now
    else:
        delivery.next_attempt_at = retry_at
    endpoint = session.get(WebhookEndpoint, delivery.endpoint_id)
    if endpoint is not None:
        if attempt.ok:
            endpoint.failing_since = None
        else:
            since = endpoint.failing_since or now
            endpoint.failing_since = since
            if endpoint.enabled and now - since.replace(tzinfo=now.tzinfo) >= disable_after:
                endpoint.enabled = False
                endpoint.disabled_reason = (
                    f"every delivery attempt failed since {since:%Y-%m-%d %H:%M:%S} UTC "
                    f"(last: {attempt.error_code or attempt.status_code})"
                )
    session.flush()


def end_undeliverable(session: Session, *, delivery: WebhookDelivery, code: str, message: str) -> None:
    """A delivery whose endpoint is disabled ends failed without an attempt (it is kept, and can be redelivered)."""
    delivery.status, delivery.ended_at, delivery.last_error = DeliveryStatus.FAILED, utcnow(), code
    session.add(WebhookAttempt(delivery_id=delivery.id, attempted_at=utcnow(), error_code=code, error_message=message))
    session.flush()


# ----------------------------------------------------------------------------------------------- reading back


def list_deliveries(
    session: Session, *, endpoint_id: str, limit: int, status: str | None = None
) -> list[WebhookDelivery]:
    """The endpoint's newest deliveries first."""
    stmt = select(WebhookDelivery).where(WebhookDelivery.endpoint_id == endpoint_id)
    if status:
        stmt = stmt.where(WebhookDelivery.status == status)
    order = (WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
    return list(session.scalars(stmt.order_by(*order).limit(limit)))


def get_delivery(session: Session, *, endpoint_id: str, delivery_id: str) -> WebhookDelivery | None:
    return session.scalars(
        select(WebhookDelivery).where(WebhookDelivery.id == delivery_id, WebhookDelivery.endpoint_id == endpoint_id)
    ).first()


def attempts_of(session: Session, *, delivery_ids: Sequence[str]) -> dict[str, list[WebhookAttempt]]:
    """Each delivery's attempts, oldest first."""
    out: dict[str, list[WebhookAttempt]] = {d: [] for d in delivery_ids}
    if delivery_ids:
        stmt = select(WebhookAttempt).where(WebhookAttempt.delivery_id.in_(list(delivery_ids)))
        for a in session.scalars(stmt.order_by(WebhookAttempt.id)):
            out[a.delivery_id].append(a)
    return out


def redeliver(session: Session, *, delivery: WebhookDelivery, retry_for: timedelta) -> WebhookDelivery:
    """Send it again now (same ``webhook-id``, its attempts kept), retried for ``retry_for`` from now."""
    now = utcnow()
    delivery.status, delivery.ended_at = DeliveryStatus.PENDING, None
    delivery.next_attempt_at, delivery.give_up_at = now, now + retry_for
    session.flush()
    return delivery


def _ended_before(cutoff: datetime) -> Any:
    ended = or_(WebhookDelivery.status == DeliveryStatus.DELIVERED, WebhookDelivery.status == DeliveryStatus.FAILED)
    return and_(ended, WebhookDelivery.ended_at < cutoff)


def count_delivered_before(session: Session, cutoff: datetime) -> int:
    """How many deliveries ``delete_delivered_before`` would delete with no limit (the janitor's dry run)."""
    return int(session.scalar(select(func.count()).where(_ended_before(cutoff))) or 0)


def delete_delivered_before(session: Session, cutoff: datetime, limit: int) -> int:
    """Delete up to ``limit`` deliveries that ended (delivered or failed) before ``cutoff``, with their attempts
    (``ON DELETE CASCADE``); pending ones are never touched. For the janitor: a bounded statement, committed by the
    caller, so no lock is held long. Returns how many deliveries went."""
    ids = list(session.scalars(select(WebhookDelivery.id).where(_ended_before(cutoff)).limit(max(0, limit))))
    if not ids:
        return 0
    # The attempts go first in their own statement as well: SQLite enforces the cascade only with its foreign-key
    # pragma on, which a connection not made by ``session.make_engine`` may lack.
    session.execute(delete(WebhookAttempt).where(WebhookAttempt.delivery_id.in_(ids)))
    res = session.execute(delete(WebhookDelivery).where(WebhookDelivery.id.in_(ids)))
    return int(res.rowcount or 0)  # type: ignore[attr-defined]
