"""Dashboard sessions: a login makes a random session id for the browser's cookie; the key stays server-side.

The id reads ``vls_`` and 43 URL-safe characters (32 random bytes); only its SHA-256 is stored, as for keys
(``vlbatch.db.keys``). It is not a key: ``find_key`` refuses anything without the ``vlb_`` prefix, so a copied
cookie is no Bearer key. A session is live while its row exists, it has not expired and its key is not revoked:
logout deletes the row, and revoking the key ends every session made with it (``revoke_key`` deletes them too).
Keyword-only; no HTTP errors.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from vlbatch.db.models import ApiKey, DashboardSession, utcnow

__all__ = ["SESSION_PREFIX", "end_key_sessions", "end_session", "find_session_key", "open_session"]

SESSION_PREFIX = "vls_"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def open_session(session: Session, *, key_id: int, lifetime: timedelta) -> str:
    """A new session for the key ``key_id``, live for ``lifetime``; its id (the cookie's value), shown only here.
    Expired sessions are swept out at the same time."""
    now = utcnow()
    session.execute(delete(DashboardSession).where(DashboardSession.expires_at < now))
    secret = SESSION_PREFIX + secrets.token_urlsafe(32)
    session.add(DashboardSession(secret_hash=_digest(secret), key_id=key_id, created_at=now, expires_at=now + lifetime))
    session.flush()
    return secret


def find_session_key(session: Session, *, secret: str) -> ApiKey | None:
    """The live key behind a live session id, or None (unknown, logged out, expired, or its key revoked)."""
    if not secret.startswith(SESSION_PREFIX):
        return None
    digest = _digest(secret)
    row = session.execute(
        select(DashboardSession, ApiKey)
        .join(ApiKey, ApiKey.id == DashboardSession.key_id)
        .where(DashboardSession.secret_hash == digest)
    ).first()
    if row is None:
        return None
    found, key = row.tuple()
    expires = found.expires_at if found.expires_at.tzinfo else found.expires_at.replace(tzinfo=UTC)
    live = hmac.compare_digest(found.secret_hash, digest) and expires > datetime.now(UTC)
    return key if live and key.revoked_at is None else None


def end_session(session: Session, *, secret: str) -> None:
    """Log a session out: its id works nowhere from now on."""
    session.execute(delete(DashboardSession).where(DashboardSession.secret_hash == _digest(secret)))


def end_key_sessions(session: Session, *, key_id: int) -> int:
    """End every session made with a key (it is being revoked); how many there were."""
    done = session.execute(delete(DashboardSession).where(DashboardSession.key_id == key_id))
    return int(getattr(done, "rowcount", 0) or 0)
