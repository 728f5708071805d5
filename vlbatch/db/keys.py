"""API keys: create (the secret is shown once), look up by secret, list, revoke. Keyword-only; no HTTP errors.

A key reads ``vlb_`` followed by 43 URL-safe characters (32 random bytes). Only the SHA-256 of the whole key
is stored: with 256 random bits there is nothing to brute-force, so a salt or a slow hash would add nothing,
and the digest can be looked up by an index. The digest found is compared again in constant time, so the
check does not hinge on how the database compares strings.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from vlbatch.db.dashboard_sessions import end_key_sessions
from vlbatch.db.models import ApiKey, utcnow

KEY_PREFIX = "vlb_"
SHOWN_PREFIX_CHARS = 12  # ``vlb_`` and 8 characters of the secret: enough to tell keys apart in a list


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class NewKey:
    """A key just made: ``secret`` exists only here, never in the database."""

    row: ApiKey
    secret: str


def create_key(session: Session, *, tenant: str, is_admin: bool = False, name: str | None = None) -> NewKey:
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(
        tenant=tenant,
        name=name,
        is_admin=is_admin,
        prefix=secret[:SHOWN_PREFIX_CHARS],
        secret_hash=hash_key(secret),
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return NewKey(row=row, secret=secret)


def find_key(session: Session, *, secret: str) -> ApiKey | None:
    """The live (not revoked) key whose secret this is, or None."""
    if not secret.startswith(KEY_PREFIX):
        return None
    digest = hash_key(secret)
    row = session.scalars(select(ApiKey).where(ApiKey.secret_hash == digest)).first()
    if row is None or not hmac.compare_digest(row.secret_hash, digest) or row.revoked_at is not None:
        return None
    return row


def list_keys(session: Session, *, tenant: str | None = None) -> list[ApiKey]:
    stmt = select(ApiKey).order_by(ApiKey.id)
    if tenant is not None:
        stmt = stmt.where(ApiKey.tenant == tenant)
    return list(session.scalars(stmt))


def revoke_key(session: Session, *, key_id: int) -> bool:
    """Revoke a key from now on, and end the dashboard sessions made with it; False when no key has this id.
    Revoking twice keeps the first time."""
    if session.get(ApiKey, key_id) is None:
        return False
    end_key_sessions(session, key_id=key_id)
    session.execute(update(ApiKey).where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None)).values(revoked_at=utcnow()))
    return True


def issue_key(database_url: str, *, tenant: str, is_admin: bool = False, name: str | None = None) -> str:
    """Migrate the database, make a key and commit it: the secret, for a process that serves the API itself
    (``vlbatch bench``, the benchmarks)."""
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    migrate(database_url)
    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            secret = create_key(session, tenant=tenant, is_admin=is_admin, name=name).secret
            session.commit()
    finally:
        engine.dispose()
    return secret
