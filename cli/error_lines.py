"""How a failed command ends: one line ``error <code>: <what>; <what to do>`` on stderr and exit status 1.

A ``VlbatchError`` is shown as it is. The failures a person meets before any of vlbatch's own checks (a database
that is down, a PostgreSQL role or database nobody created, a wrong password, a broker URL that reaches nothing)
arrive as the drivers' exceptions, often wrapped in others (SQLAlchemy's around psycopg's, Alembic's around both);
``explain`` finds them in the exception's chain and says them in vlbatch's terms, with the command that fixes them.
Anything else is ``internal_error`` with its exception's one-line text. The traceback goes to the log (the command's
log file, a service's stderr) and, with ``--verbose``, to the terminal.
"""

from __future__ import annotations

import getpass
import logging
import re
from collections.abc import Iterator

from vlbatch.errors import (
    BROKER_UNAVAILABLE,
    DATABASE_LOGIN_REFUSED,
    DATABASE_UNAVAILABLE,
    INTERNAL_ERROR,
    VlbatchError,
)
from vlbatch.logs import one_line

log = logging.getLogger("vlbatch.cli")

_MAX_LINE = 600  # a driver's message can run to many lines; the error line stays readable


class DatabaseRefused(VlbatchError):
    code = DATABASE_UNAVAILABLE


class BrokerUnavailable(VlbatchError):
    code = BROKER_UNAVAILABLE


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]


def explain(exc: BaseException, *, database_url: str, broker_url: str) -> VlbatchError | None:
    """The error ``exc`` stands for in vlbatch's terms, with what to do; None when it is not one we know."""
    for e in _chain(exc):
        if isinstance(e, VlbatchError):
            return e
    for e in _chain(exc):
        found = database_error(e, database_url) or broker_error(e, broker_url)
        if found is not None:
            return found
    return None


def shown_url(url: str) -> str:
    """``url`` without its password."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads: show it as given, it is what the user typed
        return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def database_error(exc: BaseException, url: str) -> VlbatchError | None:
    """A driver's refusal to connect, said with the command that fixes it."""
    from sqlalchemy.engine import make_url

    text = str(exc)
    if type(exc).__name__ != "OperationalError":
        return None
    where = shown_url(url)
    try:
        parsed = make_url(url)
    except Exception:
        return None
    role, database = parsed.username or getpass.getuser(), parsed.database or ""  # libpq's default: the OS user
    if m := re.search(r'role "([^"]+)" does not exist', text):
        role = m.group(1)
        return VlbatchError(
            f'PostgreSQL at {parsed.host or "localhost"}:{parsed.port or 5432} has no role "{role}" '
            f"(VLBATCH_DATABASE_URL={where}): create it and its database as the postgres user: "
            f"`sudo -u postgres createuser {role} && sudo -u postgres createdb -O {role} {database or role}`",
            code=DATABASE_LOGIN_REFUSED,
        )
    if m := re.search(r'database "([^"]+)" does not exist', text):
        database = m.group(1)
        return VlbatchError(
            f'PostgreSQL has no database "{database}" (VLBATCH_DATABASE_URL={where}): create it as the postgres '
            f"user: `sudo -u postgres createdb -O {role} {database}`",
            code=DATABASE_LOGIN_REFUSED,
        )
    if "password authentication failed" in text or "no password supplied" in text:
        return VlbatchError(
            f'PostgreSQL refused the password of role "{role}" (VLBATCH_DATABASE_URL={where}): put the right one in '
            f"the URL (postgresql+psycopg://{role}:PASSWORD@host/{database}) or set it with "
            f"`sudo -u postgres psql -c \"ALTER ROLE {role} PASSWORD '...'\"`",
            code=DATABASE_LOGIN_REFUSED,
        )
    if "unable to open database file" in text:
        return DatabaseRefused(
            f"cannot open the SQLite file of VLBATCH_DATABASE_URL={where}: its folder does not exist or is not "
            "writable; create the folder or point VLBATCH_DATABASE_URL elsewhere"
        )
    reason = next((r for r in _UNREACHABLE if r in text.lower()), None)
    if reason is not None:
        return DatabaseRefused(
            f"cannot reach the database at {where} ({reason}): start PostgreSQL there (`pg_ctlcluster <version> main "
            "start`, `systemctl start postgresql`) or set VLBATCH_DATABASE_URL to one that runs"
        )
    return None


_UNREACHABLE = (
    "connection refused",
    "could not translate host name",
    "name or service not known",
    "no route to host",
    "timeout expired",
    "timed out",
    "no such file or directory",  # a Unix socket that is not there: no server
)


def broker_error(exc: BaseException, url: str) -> VlbatchError | None:
    """Kombu's and redis-py's refusals, said with the setting to fix."""
    module = type(exc).__module__
    if not (module.startswith("kombu") or module.startswith("redis")):
        return None
    if type(exc).__name__ not in ("OperationalError", "ConnectionError", "TimeoutError", "AuthenticationError"):
        return None
    return broker_unreachable(url, exc)


def broker_unreachable(url: str, exc: BaseException) -> BrokerUnavailable:
    return BrokerUnavailable(
        f"cannot reach the broker at {shown_url(url)} ({one_line(str(exc), 200)}): start Redis there "
        "(`redis-server --daemonize yes`) or set VLBATCH_BROKER_URL to redis://host:port/db"
    )


def check_broker(url: str, *, timeout_s: float = 5.0) -> None:
    """Connect to the broker once; ``BrokerUnavailable`` naming the URL and the fix when that fails."""
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=timeout_s) as conn:
            conn.ensure_connection(max_retries=1)
    except KeyError as exc:  # kombu's unknown transport: the URL's scheme is not a broker's
        raise BrokerUnavailable(
            f"VLBATCH_BROKER_URL={shown_url(url)} is not a broker URL ({exc.args[0]}): use redis://host:port/db"
        ) from exc
    except Exception as exc:
        raise broker_unreachable(url, exc) from exc


def error_line(exc: BaseException, *, database_url: str, broker_url: str) -> str:
    """The one line a failed command ends with; the traceback is logged (the log file, or stderr with -v)."""
    err = explain(exc, database_url=database_url, broker_url=broker_url)
    if err is None:
        return one_line(f"error {INTERNAL_ERROR}: {type(exc).__name__}: {exc}", _MAX_LINE)
    return one_line(f"error {err.code}: {err.message}", _MAX_LINE)
