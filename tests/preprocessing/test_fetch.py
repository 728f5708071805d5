"""Image URL fetching: refused addresses never get a socket, redirects are checked hop by hop, the connection
goes to the checked address, one deadline bounds the fetch, credentials never reach a message.

Traffic goes to a loopback server only; every other address is refused before a connection is tried, and the
fixtures below fail a test that tries one.
"""

from __future__ import annotations

import http.server
import ipaddress
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from preprocessing import fetch
from preprocessing.addresses import AddressPolicy, forbidden_reason, literal_address
from preprocessing.fetch import UrlPolicy, fetch_url, redact
from preprocessing.input_errors import InputError

LOOPBACK_ONLY = AddressPolicy.of(["127.0.0.1/32"])
BODY = b"\x89PNG not really, but bytes"


class _Resolver:
    """Answers every lookup with ``answers`` (one list per call, the last repeated) and records the calls."""

    def __init__(self, *answers: Sequence[str]) -> None:
        self.answers = [list(a) for a in answers]
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        return self.answers[min(len(self.calls), len(self.answers)) - 1]


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every TCP connect the code under test makes, which must be to a numeric loopback address (a name or any
    other address fails the test at the socket boundary, before a packet could leave)."""
    made: list[tuple[str, int]] = []
    real_create = socket.create_connection
    real_getaddrinfo = socket.getaddrinfo

    def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        host, port = address
        ip = ipaddress.ip_address(host)  # a name here would be a lookup the checks did not see
        assert ip.is_loopback, f"connect to non-loopback {host}"
        made.append((host, port))
        return real_create(address, *args, **kwargs)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        ipaddress.ip_address(host)  # numeric only: name lookups go through the policy's resolver
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", create_connection)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return made


@pytest.fixture
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test on any connect or name lookup at all."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a socket was opened or a name looked up: {args!r}")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def _fetch(url: str, policy: UrlPolicy, *, timeout_s: float = 5.0, max_bytes: int = 10_000) -> bytes:
    return fetch_url(url, policy=policy, max_bytes=max_bytes, timeout_s=timeout_s)


def _refused(url: str, policy: UrlPolicy, **kw: Any) -> InputError:
    with pytest.raises(InputError) as ei:
        _fetch(url, policy, **kw)
    return ei.value


# ------------------------------------------------------------------------ refused before any socket

FORBIDDEN_ANSWERS = [
    "127.0.0.1",
    "127.255.0.9",
    "0.0.0.0",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",  # cloud metadata
    "100.64.0.1",  # carrier-grade NAT
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "198.18.0.1",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "2002:7f00:1::",  # 6to4 around 127.0.0.1
    "64:ff9b::a00:1",  # NAT64 around 10.0.0.1
]


@pytest.mark.parametrize("answer", FORBIDDEN_ANSWERS)
def test_a_name_resolving_to_a_forbidden_address_is_refused_without_a_socket(answer: str, no_sockets: None) -> None:
    resolver = _Resolver([answer])
    err = _refused("http://images.example.com/a.png", UrlPolicy(resolver=resolver))
    assert err.code == "url_forbidden"
    assert answer in err.message or str(ipaddress.ip_address(answer)) in err.message
    assert resolver.calls == ["images.example.com"]


def test_every_resolved_address_is_checked_not_only_the_first(no_sockets: None) -> None:
    resolver = _Resolver(["93.184.216.34", "2606:2800:220:1::1", "10.0.0.7"])
    err = _refused("https://mixed.example.com/a.png", UrlPolicy(resolver=resolver))
    assert err.code == "url_forbidden"
    assert "10.0.0.7" in err.message


@pytest.mark.parametrize(
    "host",
    ["2130706433", "0x7f.1", "127.1", "0x7f000001", "017700000001", "0", "[::ffff:7f00:1]", "[::]", "[::1]", "0.0.0.0"],
)
def test_literal_addresses_in_any_spelling_are_refused_without_a_lookup(host: str, no_sockets: None) -> None:
    resolver = _Resolver(["93.184.216.34"])
    err = _refused(f"http://{host}:8080/a.png", UrlPolicy(resolver=resolver))
    assert err.code == "url_forbidden", err.message
    assert resolver.calls == []


def test_octal_dotted_quad_is_not_a_valid_url(no_sockets: None) -> None:
    err = _refused("http://0177.0.0.1/a.png", UrlPolicy(resolver=_Resolver(["93.184.216.34"])))
    assert err.code == "unsupported_source"


@pytest.mark.parametrize("url", ["ftp://images.example.com/a.png", "file:///etc/passwd", "gopher://x.example/"])
def test_only_http_and_https_are_fetched(url: str, no_sockets: None) -> None:
    assert _refused(url, UrlPolicy(resolver=_Resolver(["93.184.216.34"]))).code == "url_forbidden"


def test_credentials_are_refused_and_never_shown(no_sockets: None) -> None:
    resolver = _Resolver(["93.184.216.34"])
    err = _refused("https://alice:hunter2@images.example.com/a.png?x=1", UrlPolicy(resolver=resolver))
    assert err.code == "url_forbidden"
    assert "hunter2" not in str(err) and "alice" not in str(err)
    assert "https://***@images.example.com/a.png?x=1" in err.message
    assert resolver.calls == []


def test_redact() -> None:
    assert redact("http://u:p@h.example:81/x@y?q=a@b") == "http://***@h.example:81/x@y?q=a@b"
    assert redact("https://h.example/a@b") == "https://h.example/a@b"
    assert redact("not a url") == "not a url"


def test_address_policy_allows_networks_and_judges_mapped_addresses_by_their_ipv4() -> None:
    policy = AddressPolicy.of(["127.0.0.1/32", "fd00::/8"])
    for allowed in ["127.0.0.1", "::ffff:127.0.0.1", "fd12::3", "93.184.216.34"]:
        assert forbidden_reason(ipaddress.ip_address(allowed), policy) is None, allowed
    assert forbidden_reason(ipaddress.ip_address("127.0.0.2"), policy) == "loopback"
    assert forbidden_reason(ipaddress.ip_address("169.254.1.1"), policy) == "link-local"
    assert literal_address("0x7f.1") == ipaddress.ip_address("127.0.0.1")
    assert literal_address("images.example.com") is None


# ------------------------------------------------------------------------------- a loopback server


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    seen: list[tuple[str, str]]  # (path, Host header) of every request


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    images: dict[str, bytes] = {}  # noqa: RUF012 - paths a test adds, served as they are

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Host", "")))
        if self.path == "/img.png":
            self._send(200, BODY)
        elif self.path in self.images:
            self._send(200, self.images[self.path])
        elif self.path.startswith("/go?"):
            self.send_response(302)
            self.send_header("Location", self.path.removeprefix("/go?"))
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/loop":
            self.send_response(301)
            self.send_header("Location", "/loop")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/trickle":  # 1 byte every 0.4 s, for up to 20 s
            self.send_response(200)
            self.send_header("Content-Length", "50")
            self.end_headers()
            for _ in range(50):
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.4)
        else:
            self._send(404, b"nope")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.seen = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def _base(srv: _Server) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def test_loopback_is_refused_by_default(server: _Server, connects: list[tuple[str, int]]) -> None:
    err = _refused(f"{_base(server)}/img.png", UrlPolicy())
    assert err.code == "url_forbidden"
    assert "loopback" in err.message and "VLBATCH_URL_ALLOW_NETWORKS" in err.message
    assert connects == [] and server.seen == []


def test_the_allowlist_lets_loopback_through(server: _Server, connects: list[tuple[str, int]]) -> None:
    assert _fetch(f"{_base(server)}/img.png", UrlPolicy(addresses=LOOPBACK_ONLY)) == BODY
    assert connects == [("127.0.0.1", server.server_address[1])]


def test_the_connection_goes_to_the_checked_address_and_keeps_the_url_host(
    server: _Server, connects: list[tuple[str, int]]
) -> None:
    # A name that answers 127.0.0.1 once and a different loopback address afterwards (DNS rebinding): the one
    # answer that was checked is the one dialled, and the server still sees the URL's host.
    port = server.server_address[1]
    resolver = _Resolver(["127.0.0.1"], ["127.0.0.2"])
    policy = UrlPolicy(addresses=AddressPolicy.of([], hosts=["images.internal"]), resolver=resolver)
    assert _fetch(f"http://images.internal:{port}/img.png", policy) == BODY
    assert resolver.calls == ["images.internal"]
    assert connects == [("127.0.0.1", port)]
    assert server.seen == [("/img.png", f"images.internal:{port}")]


def test_a_redirect_to_a_forbidden_address_is_refused(server: _Server, connects: list[tuple[str, int]]) -> None:
    policy = UrlPolicy(addresses=LOOPBACK_ONLY)
    for target in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:9/",
        "http://127.0.0.2:9/",
        "http://2130706434:9/",
        "file:///etc/passwd",
    ]:
        err = _refused(f"{_base(server)}/go?{target}", policy)
        assert err.code == "url_forbidden", (target, err.message)
    assert {host for host, _ in connects} == {"127.0.0.1"}


def test_redirects_are_followed_within_the_limit(server: _Server, connects: list[tuple[str, int]]) -> None:
    base = _base(server)
    assert _fetch(f"{base}/go?{base}/go?/img.png", UrlPolicy(addresses=LOOPBACK_ONLY)) == BODY
    assert [path for path, _ in server.seen] == [f"/go?{base}/go?/img.png", "/go?/img.png", "/img.png"]
    err = _refused(f"{base}/loop", UrlPolicy(addresses=LOOPBACK_ONLY, max_redirects=3))
    assert err.code == "fetch_error" and "more than 3 redirects" in err.message
    assert len(server.seen) == 3 + 4


def test_a_redirect_carrying_credentials_is_refused_and_redacted(
    server: _Server, connects: list[tuple[str, int]]
) -> None:
    port = server.server_address[1]
    err = _refused(f"{_base(server)}/go?http://bob:s3cret@127.0.0.1:{port}/img.png", UrlPolicy(addresses=LOOPBACK_ONLY))
    assert err.code == "url_forbidden"
    assert "s3cret" not in str(err) and "bob" not in str(err)
    assert [path for path, _ in server.seen] == [f"/go?http://bob:s3cret@127.0.0.1:{port}/img.png"]


def test_a_trickling_server_is_cut_at_the_deadline(server: _Server, connects: list[tuple[str, int]]) -> None:
    start = time.monotonic()
    err = _refused(f"{_base(server)}/trickle", UrlPolicy(addresses=LOOPBACK_ONLY), timeout_s=1.5)
    elapsed = time.monotonic() - start
    assert err.code == "fetch_error" and "within 1.5 s" in err.message
    # Each byte arrives well inside any per-read timeout; only a deadline for the whole fetch stops it.
    assert 1.4 <= elapsed < 3.0, elapsed


def test_a_slow_lookup_counts_against_the_deadline(no_sockets: None) -> None:
    def slow(host: str, port: int) -> list[str]:
        time.sleep(1.0)
        return ["93.184.216.34"]

    start = time.monotonic()
    err = _refused("http://slow.example.com/a.png", UrlPolicy(resolver=slow), timeout_s=0.3)
    assert err.code == "fetch_error" and "deadline" in err.message
    assert time.monotonic() - start < 0.9


def test_size_cap_and_status_codes_hold(server: _Server, connects: list[tuple[str, int]]) -> None:
    policy = UrlPolicy(addresses=LOOPBACK_ONLY)
    assert _refused(f"{_base(server)}/img.png", policy, max_bytes=5).code == "too_large"
    assert _refused(f"{_base(server)}/missing", policy).code == "not_found"


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_an_unreachable_allowed_address_is_a_fetch_error(connects: list[tuple[str, int]]) -> None:
    err = _refused(f"http://127.0.0.1:{_unused_port()}/a.png", UrlPolicy(addresses=LOOPBACK_ONLY))
    assert err.code == "fetch_error"


def test_the_worker_policy_comes_from_the_settings(server: _Server, connects: list[tuple[str, int]]) -> None:
    from pydantic import ValidationError

    from vlbatch.settings import Settings
    from worker.image_prep import url_policy

    url = f"{_base(server)}/img.png"
    assert _refused(url, url_policy(Settings())).code == "url_forbidden"
    opened = Settings(url_allow_networks="10.0.0.0/8, 127.0.0.0/8", url_max_redirects=0)
    assert _fetch(url, url_policy(opened)) == BODY
    assert _refused(f"{_base(server)}/go?/img.png", url_policy(opened)).code == "fetch_error"
    assert url_policy(Settings(url_allow_hosts="Images.Internal")).addresses.host_allowed("images.internal.")
    with pytest.raises(ValidationError):
        Settings(url_allow_networks="not-a-network")


@pytest.fixture
def tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    """The loopback server behind TLS with a certificate for images.internal, which the fetch trusts."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    name = ["-subj", "/CN=images.internal", "-addext", "subjectAltName=DNS:images.internal"]
    files = ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", *name, *files],
        check=True,
        capture_output=True,
        timeout=60,
    )
    client_context = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(fetch, "_ssl_context", lambda: client_context)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.seen = []
    srv.socket = server_context.wrap_socket(srv.socket, server_side=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def test_https_goes_to_the_checked_address_and_verifies_the_url_host(
    tls_server: _Server, connects: list[tuple[str, int]]
) -> None:
    port = tls_server.server_address[1]
    policy = UrlPolicy(addresses=LOOPBACK_ONLY, resolver=_Resolver(["127.0.0.1"]))
    assert _fetch(f"https://images.internal:{port}/img.png", policy) == BODY
    assert tls_server.seen == [("/img.png", f"images.internal:{port}")]
    # Same address, another name: the certificate is checked against the URL's host, not the address dialled.
    err = _refused(f"https://other.internal:{port}/img.png", policy)
    assert err.code == "fetch_error" and "CERTIFICATE_VERIFY_FAILED" in err.message
    assert {host for host, _ in connects} == {"127.0.0.1"}


def test_an_image_item_with_a_loopback_url_fails_with_url_forbidden_unless_allowed(
    server: _Server, connects: list[tuple[str, int]], tmp_path: Path
) -> None:
    import io

    from PIL import Image

    from engine.vision import VisionGeometry
    from vlbatch.db.tenants import global_roots
    from vlbatch.settings import Settings
    from worker.image_prep import prepare_images

    png = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 200, 10)).save(png, format="PNG")
    _Handler.images["/photo.png"] = png.getvalue()
    url = f"{_base(server)}/photo.png"
    kw: dict[str, Any] = {"geometry": VisionGeometry(), "max_visual_tokens": 64, "limit": 2}
    with pytest.raises(InputError) as ei:
        denied = Settings(database_url=f"sqlite:///{tmp_path}/x.db")
        prepare_images([url], settings=denied, roots=global_roots(denied), **kw)
    assert ei.value.code == "url_forbidden" and connects == []
    allowed = Settings(database_url=f"sqlite:///{tmp_path}/x.db", url_allow_networks="127.0.0.1/32")
    (image,) = prepare_images([url], settings=allowed, roots=global_roots(allowed), **kw)
    assert image.size[0] % 28 == 0 and image.size[1] % 28 == 0
    assert [path for path, _ in server.seen] == ["/photo.png"]
