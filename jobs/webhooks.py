"""Webhooks: checking an endpoint's URL, signing a delivery the Standard Webhooks way, and the sender.

An endpoint's URL obeys the rules of image URLs (``preprocessing.fetch``: http or https, no credentials, and every
address its host resolves to public), checked when it is stored and again at each attempt, since a name may
resolve elsewhere later; loopback and private receivers are allowed only with ``VLBATCH_WEBHOOK_ALLOW_LOOPBACK``.

Deliveries are written by the outbox (``vlbatch.db.webhooks``) in the transaction that ends a job or batch. The
sender (``send_forever``, a thread of the API and of every worker, beside the reconciler and off the engine's path;
the API's also finalizes batches that wait for a read, so their events go out)
claims due ones, sends each from a few threads of its own with no transaction open (a receiver that hangs holds
no lock and no worker), one hop, no redirect followed, within ``VLBATCH_WEBHOOK_TIMEOUT_S``, reading at most
``VLBATCH_WEBHOOK_MAX_ANSWER_BYTES`` of the answer, and records the attempt. A failure is tried again after an
exponential back-off with jitter (``backoff``) until ``VLBATCH_WEBHOOK_RETRY_FOR_S`` after the event, then the
delivery fails; an endpoint whose attempts all failed for ``VLBATCH_WEBHOOK_DISABLE_AFTER_S`` is disabled.

Signing (https://www.standardwebhooks.com): ``webhook-id`` is the delivery's id (the same on every attempt),
``webhook-timestamp`` the attempt's Unix seconds, ``webhook-signature`` ``v1,`` and the base64 HMAC-SHA256 of
``id.timestamp.body`` under the secret's base64-decoded key (after ``whsec_``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import logging
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from sqlalchemy.orm import Session, sessionmaker

from jobs import batches as batch_jobs
from jobs.refusals import JobRefused
from preprocessing.addresses import AddressPolicy
from preprocessing.fetch import UrlPolicy, check_url, post_once, redact
from preprocessing.input_errors import InputError
from vlbatch.db import batches, webhooks
from vlbatch.db.models import utcnow
from vlbatch.db.webhook_tables import WebhookDelivery, WebhookEndpoint
from vlbatch.errors import (
    INVALID_WEBHOOK,
    URL_FORBIDDEN,
    WEBHOOK_ENDPOINT_DISABLED,
    WEBHOOK_HTTP_ERROR,
    WEBHOOK_REDIRECT_REFUSED,
    WEBHOOK_UNREACHABLE,
    WEBHOOK_URL_REFUSED,
)
from vlbatch.settings import Settings

log = logging.getLogger(__name__)

# What VLBATCH_WEBHOOK_ALLOW_LOOPBACK opens: this host and the operator's private networks; link-local (cloud
# metadata), multicast, reserved and the other special ranges stay refused.
OPT_IN_NETWORKS = ("127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
ALLOW_HINT = "a loopback or private receiver needs VLBATCH_WEBHOOK_ALLOW_LOOPBACK=true"
MAX_BACKOFF_S = 3600.0
SEND_THREADS = 4  # deliveries sent side by side per pass: one slow receiver does not hold the others back
CLAIM_PER_PASS = 32
USER_AGENT = "vlbatch-webhooks/1"


def url_policy(settings: Settings) -> UrlPolicy:
    networks = [ipaddress.ip_network(n) for n in OPT_IN_NETWORKS] if settings.webhooks.webhook_allow_loopback else []
    return UrlPolicy(addresses=AddressPolicy.of(networks=networks), max_redirects=0, allow_hint=ALLOW_HINT)


def checked_events(events: Sequence[str]) -> list[str]:
    unknown = sorted(set(events) - set(webhooks.EVENTS))
    if unknown or not events:
        what = f"unknown events {unknown}" if unknown else "an endpoint needs at least one event"
        raise JobRefused(INVALID_WEBHOOK, f"{what}; known events: {', '.join(webhooks.EVENTS)}")
    return list(dict.fromkeys(events))


def checked_url(settings: Settings, url: str) -> str:
    """``url`` when a delivery may go there now; ``JobRefused`` (``webhook_url_refused`` for an address that is not
    allowed, ``invalid_webhook`` for a URL that is not one) otherwise."""
    if len(url) > 2048:
        raise JobRefused(INVALID_WEBHOOK, "the URL is longer than 2048 characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:
        raise JobRefused(INVALID_WEBHOOK, f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not host:
        raise JobRefused(INVALID_WEBHOOK, f"{redact(url)}: a webhook URL reads http(s)://host/path")
    if parts.username is not None or parts.password is not None:
        raise JobRefused(
            INVALID_WEBHOOK, f"{redact(url)}: no credentials in the URL; the signature tells the receiver who sent it"
        )
    try:
        check_url(url, policy=url_policy(settings), timeout_s=settings.webhooks.webhook_timeout_s)
    except InputError as exc:
        code = WEBHOOK_URL_REFUSED if exc.code == URL_FORBIDDEN else INVALID_WEBHOOK
        raise JobRefused(code, exc.message) from None
    return url


# ------------------------------------------------------------------------------------------------- signing


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix(webhooks.SECRET_PREFIX))
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def signed_headers(secret: str, msg_id: str, body: bytes, *, now: float | None = None) -> dict[str, str]:
    timestamp = int(time.time() if now is None else now)
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, msg_id, timestamp, body),
    }


def body_of(delivery: WebhookDelivery) -> bytes:
    return json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True).encode()


# ------------------------------------------------------------------------------------------------- sending


def backoff(settings: Settings, attempts: int, rng: random.Random | None = None) -> float:
    """Seconds before the next try after ``attempts`` failed ones: the base doubled per attempt, capped at an hour,
    with jitter (a half to the whole of it), so receivers that come back are not hit by every sender at once."""
    delay = min(MAX_BACKOFF_S, settings.webhooks.webhook_retry_base_s * 2 ** max(0, attempts - 1))
    return delay * (rng or random).uniform(0.5, 1.0)


@dataclass(frozen=True)
class _Job:
    """A claimed delivery as the sending thread needs it: no ORM row crosses threads."""

    delivery_id: str
    url: str
    secret: str
    body: bytes


def attempt(settings: Settings, url: str, secret: str, msg_id: str, body: bytes) -> webhooks.Attempt:
    """One try; never raises for what the receiver or the network does."""
    started = time.monotonic()

    def took() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        answer = post_once(
            url,
            body=body,
            headers=signed_headers(secret, msg_id, body),
            policy=url_policy(settings),
            timeout_s=settings.webhooks.webhook_timeout_s,
            max_answer_bytes=settings.webhooks.webhook_max_answer_bytes,
        )
    except InputError as exc:
        code = WEBHOOK_URL_REFUSED if exc.code == URL_FORBIDDEN else WEBHOOK_UNREACHABLE
        return webhooks.Attempt(
            ok=False, status_code=None, latency_ms=took(), error_code=code, error_message=exc.message
        )
    text = answer.body.decode("utf-8", "replace") or None
    if 200 <= answer.status < 300:
        return webhooks.Attempt(ok=True, status_code=answer.status, latency_ms=took(), answer=text)
    if 300 <= answer.status < 400:
        where = redact(answer.location or "")
        message = f"HTTP {answer.status} to {where or 'nowhere'}; redirects are not followed"
        code = WEBHOOK_REDIRECT_REFUSED
    else:
        message, code = f"HTTP {answer.status}", WEBHOOK_HTTP_ERROR
    return webhooks.Attempt(
        ok=False, status_code=answer.status, latency_ms=took(), error_code=code, error_message=message, answer=text
    )


def _give_up_at(settings: Settings, delivery: WebhookDelivery) -> datetime:
    if delivery.give_up_at is not None:
        return delivery.give_up_at
    return delivery.created_at + timedelta(seconds=settings.webhooks.webhook_retry_for_s)


def _aware(value: datetime, like: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=like.tzinfo)


def _claim(settings: Settings, sessions: sessionmaker[Session]) -> list[_Job]:
    lease = timedelta(seconds=settings.webhooks.webhook_timeout_s + 30)
    with sessions() as s:
        claimed = webhooks.claim_due(s, now=utcnow(), lease=lease, limit=CLAIM_PER_PASS)
        jobs: list[_Job] = []
        for d in claimed:
            endpoint = s.get(WebhookEndpoint, d.endpoint_id)
            if endpoint is None:
                continue
            if not endpoint.enabled:
                reason = endpoint.disabled_reason or "disabled"
                webhooks.end_undeliverable(s, delivery=d, code=WEBHOOK_ENDPOINT_DISABLED, message=reason)
                continue
            jobs.append(_Job(d.id, endpoint.url, endpoint.secret, body_of(d)))
        s.commit()
    return jobs


def _record(settings: Settings, sessions: sessionmaker[Session], job: _Job, result: webhooks.Attempt) -> None:
    with sessions() as s:
        delivery = s.get(WebhookDelivery, job.delivery_id)
        if delivery is None:  # its endpoint was deleted meanwhile
            return
        now = utcnow()
        retry_at: datetime | None = None
        if not result.ok:
            retry_at = now + timedelta(seconds=backoff(settings, delivery.attempts + 1))
            if retry_at > _aware(_give_up_at(settings, delivery), now):
                retry_at = None
        disable_after = timedelta(seconds=settings.webhooks.webhook_disable_after_s)
        webhooks.record_attempt(s, delivery=delivery, attempt=result, retry_at=retry_at, disable_after=disable_after)
        s.commit()


def send_due(settings: Settings, sessions: sessionmaker[Session], pool: ThreadPoolExecutor | None = None) -> int:
    """One pass: claim the due deliveries, send them, record each attempt. Returns how many were tried."""
    jobs = _claim(settings, sessions)

    def one(job: _Job) -> None:
        result = attempt(settings, job.url, job.secret, job.delivery_id, job.body)
        if not result.ok:
            log.info("webhook %s to %s: %s", job.delivery_id, redact(job.url), result.error_message)
        _record(settings, sessions, job, result)

    if pool is None:
        for job in jobs:
            one(job)
    else:
        for future in [pool.submit(one, job) for job in jobs]:
            future.result()
    return len(jobs)


def finalize_batches(settings: Settings, sessions: sessionmaker[Session], limit: int = 20) -> int:
    """Move on the batches a read would finalize, of tenants that want batch events, so their event is sent
    without waiting for the client to poll. Returns how many were looked at."""
    with sessions() as s:
        tenants = webhooks.tenants_wanting(s, events=webhooks.BATCH_EVENTS)
        due = batches.due_to_finalize(s, now=utcnow(), tenants=tenants, limit=limit) if tenants else []
        for batch in due:
            try:
                batch_jobs.refresh(s, settings, batch)
            except Exception:  # one batch that cannot be written out does not hold back the others
                log.exception("batch %s: finalizing for its webhook failed", batch.id)
                s.rollback()
    return len(due)


def send_forever(
    settings: Settings, sessions: sessionmaker[Session], stop: threading.Event, *, batches_too: bool = False
) -> None:
    """A pass every VLBATCH_WEBHOOK_POLL_S until ``stop`` is set (the API and the engine workers run it). With
    ``batches_too`` (the API: batch files live in its VLBATCH_DATA_DIR, which a worker on another host may not
    share) each pass first finalizes the batches that wait for a read."""
    with ThreadPoolExecutor(max_workers=SEND_THREADS, thread_name_prefix="webhook-send") as pool:
        while not stop.wait(settings.webhooks.webhook_poll_s):
            try:
                if batches_too:
                    finalize_batches(settings, sessions)
                while send_due(settings, sessions, pool) and not stop.is_set():
                    pass  # a full pass may leave more due: take them before waiting
            except Exception:  # a database outage: the next pass tries again
                log.exception("webhook sender pass failed")


def start_sender(
    settings: Settings, sessions: sessionmaker[Session], stop: threading.Event, *, batches_too: bool = False
) -> None:
    if settings.webhooks.webhook_sender:
        threading.Thread(
            target=send_forever,
            args=(settings, sessions, stop),
            kwargs={"batches_too": batches_too},
            name="webhook-sender",
            daemon=True,
        ).start()
