"""``vlbatch migrate``: the cluster's migration Job brings an empty database to the newest schema. ``vlbatch api``:
the server bounds a request's head (bytes and fields) and believes forwarded headers from the trusted proxies only."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, inspect
from typer.testing import CliRunner

from vlbatch.settings import get_settings


def test_migrate_creates_the_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.main import app

    url = f"sqlite:///{tmp_path}/fresh.db"
    monkeypatch.setenv("VLBATCH_DATABASE_URL", url)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["migrate"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    engine = create_engine(url)
    assert {"jobs", "chunks", "items", "results", "alembic_version"} <= set(inspect(engine).get_table_names())
    engine.dispose()


# ------------------------------------------------------------------------- the API server (`vlbatch api`)


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A real ``vlbatch api`` child that believes forwarded headers from 127.0.0.2 only: (base URL, a key)."""
    from benchmarks.harness.children import api_process, child_env
    from tests.conftest import make_key

    folder = tmp_path_factory.mktemp("api-server")
    url = f"sqlite:///{folder / 'api.db'}"
    key = make_key(url, tenant="acme")
    env = child_env(
        {
            "VLBATCH_DATABASE_URL": url,
            "VLBATCH_BROKER_URL": "redis://127.0.0.1:1/0",  # no route here reaches the broker
            "VLBATCH_API_RECONCILE": "false",
            "VLBATCH_TRUSTED_PROXIES": "127.0.0.2",
        }
    )
    with api_process(env, folder / "api.log", cwd=folder) as api:
        yield api.base, key


def _raw(base: str, head: bytes, *, chunk: int = 64 * 1024) -> bytes:
    """Sends ``head`` (a request head, unterminated or not) as fast as the server takes it and returns what it
    answers; the server may close the connection while the head is still going out."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        try:
            for at in range(0, len(head), chunk):
                sock.sendall(head[at : at + chunk])
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused mid-head: the answer was sent before the close
        answer = b""
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while data := sock.recv(65536):
                answer += data
                if b"\r\n\r\n" in answer and b"connection: close" not in answer.lower():
                    break
    return answer


def test_a_50_mib_header_is_refused_before_it_is_read(api_server: tuple[str, str]) -> None:
    base, _ = api_server
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (50 * 1024**2) + b"\r\n\r\n"
    answer = _raw(base, head)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200  # the server goes on


def test_twenty_thousand_headers_are_refused_and_a_hundred_and_one_get_431(api_server: tuple[str, str]) -> None:
    base, _ = api_server
    many = b"".join(b"X-H%d: 1\r\n" % i for i in range(20_000))
    assert _raw(base, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n").startswith(b"HTTP/1.1 400")
    headers = [(f"X-H{i}", "1") for i in range(101)]  # within the head's bytes, over the count
    r = httpx.get(f"{base}/healthz", headers=headers, timeout=10)
    assert r.status_code == 431 and r.json()["code"] == "too_many_headers"
    assert httpx.get(f"{base}/healthz", headers=headers[:90], timeout=10).status_code == 200


def test_the_dashboard_cookie_is_secure_behind_a_trusted_tls_proxy_only(api_server: tuple[str, str]) -> None:
    base, key = api_server
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}

    def login_from(address: str) -> str:
        transport = httpx.HTTPTransport(local_address=address)
        with httpx.Client(base_url=base, transport=transport, follow_redirects=False) as client:
            r = client.post("/ui/login", data={"key": key}, headers=forwarded)
            assert r.status_code == 303, r.text
            return r.headers["set-cookie"].lower()

    assert "secure" in login_from("127.0.0.2").split("; ")  # the proxy VLBATCH_TRUSTED_PROXIES names
    assert "secure" not in login_from("127.0.0.1").split("; ")  # anyone else's X-Forwarded-Proto is not believed
