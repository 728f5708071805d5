"""The key is checked before a body is read, over real HTTP: a client without a key is answered while its body
is still on the wire (a JSON body or a multipart upload), and nothing of it reaches the disk. The client here is
a raw socket that sends the headers and the start of a body, then waits: an API that reads the body first never
answers it."""

from __future__ import annotations

import contextlib
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from api.main import create_app
from tests.conftest import bearer, make_key
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(120)

BOUNDARY = "hostileboundary"
ANSWER_WAIT = 15  # seconds the raw client waits for an answer before it counts as none


def disk_bytes(*folders: Path) -> int:
    return sum(p.stat().st_size for folder in folders if folder.exists() for p in folder.rglob("*") if p.is_file())


class RawPost:
    """A POST whose headers and first body bytes are sent, the rest never: ``answer`` reads what came back."""

    def __init__(self, url: str, path: str, headers: dict[str, str], first: bytes) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=ANSWER_WAIT)
        head = [f"POST {path} HTTP/1.1", f"Host: {parts.hostname}", *(f"{k}: {v}" for k, v in headers.items())]
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        # The API may answer and close while these bytes are still on the wire, as an early refusal does: the
        # kernel keeps the answer that came before the reset, so it is read next.
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            self.sock.sendall(first)

    def answer(self) -> tuple[int, bytes]:
        """The status and body of the answer; ``TimeoutError`` when the API sends none (it waits for the body)."""
        data = b""
        while not self._complete(data):
            try:
                piece = self.sock.recv(65536)
            except ConnectionResetError:
                break  # the reset after the answer: what came before it is all there is
            if not piece:
                break
            data += piece
        assert data.startswith(b"HTTP/1.1 "), f"no answer before the connection closed: {data[:80]!r}"
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), body

    @staticmethod
    def _complete(data: bytes) -> bool:
        """The head and as many body bytes as its Content-Length names have come (the head and body may come apart)."""
        head, sep, body = data.partition(b"\r\n\r\n")
        if not sep:
            return False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                return len(body) >= int(value)
        return True

    def close(self) -> None:
        self.sock.close()


def multipart_start(n_bytes: int) -> bytes:
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    return head + b"x" * n_bytes


@pytest.fixture
def server(
    db_url: str, redis_url: str, tmp_path: Path, serve: type, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple]:
    spool = tmp_path / "spool"  # where a multipart parser would spool an upload (the process's temp dir)
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    settings = Settings(
        database_url=db_url,
        broker_url=redis_url,
        model_name="tiny",
        data_dir=tmp_path / "data",
        max_upload_bytes=256 * 1024,
    )
    key = make_key(db_url, tenant="acme")
    with serve(create_app(settings)) as srv:
        yield srv, key, [spool, tmp_path / "data"]


@pytest.mark.parametrize("headers", [{}, bearer("vlb_not-a-key")], ids=["no-key", "unknown-key"])
def test_an_unauthenticated_1gb_upload_is_refused_before_its_body_is_read(server: tuple, headers: dict) -> None:
    srv, _, folders = server
    sent = 2 * 1024 * 1024  # of a declared 1 GB
    post = RawPost(
        srv.url,
        "/v1/files",
        {
            **headers,
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
            "Content-Length": str(1024**3),
        },
        multipart_start(sent),
    )
    try:
        status, body = post.answer()
        on_disk = disk_bytes(*folders)  # measured while the connection is still open
    finally:
        post.close()
    assert status == 401 and b'"unauthorized"' in body
    assert on_disk < 1024 * 1024


def test_an_unauthenticated_json_body_is_refused_before_it_is_read(server: tuple) -> None:
    srv, _, _ = server
    post = RawPost(
        srv.url,
        "/v1/jobs/tagging",
        {"Content-Type": "application/json", "Content-Length": str(12 * 1024 * 1024)},
        b'{"items": [' + b'{"images": ["/a.jpg"]},' * 1000,
    )
    try:
        status, body = post.answer()
    finally:
        post.close()
    assert status == 401 and b'"unauthorized"' in body


def test_an_upload_declared_over_the_cap_is_refused_before_its_body_is_read(server: tuple) -> None:
    srv, key, folders = server
    post = RawPost(
        srv.url,
        "/v1/files",
        {
            **bearer(key),
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
            "Content-Length": str(1024**3),
        },
        multipart_start(1024 * 1024),
    )
    try:
        status, body = post.answer()
        on_disk = disk_bytes(*folders)
    finally:
        post.close()
    assert status == 413 and b'"upload_too_large"' in body
    assert on_disk < 1024 * 1024


def test_a_chunked_upload_is_cut_off_at_the_cap_while_it_streams(server: tuple) -> None:
    srv, key, folders = server
    piece = 512 * 1024  # one chunk past the 256 KiB cap; the rest of the upload is never sent
    first = multipart_start(piece)
    post = RawPost(
        srv.url,
        "/v1/files",
        {
            **bearer(key),
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
            "Transfer-Encoding": "chunked",
        },
        f"{len(first):x}\r\n".encode() + first + b"\r\n",
    )
    try:
        status, body = post.answer()
        on_disk = disk_bytes(*folders)
    finally:
        post.close()
    assert status == 413 and b'"upload_too_large"' in body
    assert on_disk < 1024 * 1024
    kept = folders[1] / "files"
    assert not [p for p in kept.iterdir() if not p.name.startswith(".")] if kept.exists() else True


def test_a_key_that_cannot_be_looked_up_is_a_503_not_a_500(redis_url: str, serve: type) -> None:
    """The gate runs outside the app's error handlers: a database gone while it looks a key up still answers
    ``database_unavailable``."""
    psycopg = pytest.importorskip("psycopg")
    from tests.conftest import PG_ADMIN_URL

    name = f"vlbatch_gate_{uuid.uuid4().hex[:8]}"
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3)
    except Exception as exc:  # the suite's own rule: a missing service skips locally
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{PG_ADMIN_URL.rsplit('/', 1)[0].replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    try:
        key = make_key(url)
        settings = Settings(database_url=url, broker_url=redis_url, model_name="tiny", api_reconcile=False)
        with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as client:
            assert client.get("/v1/jobs", headers=bearer(key)).status_code == 200
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            r = client.get("/v1/jobs", headers=bearer(key))
            assert r.status_code == 503 and r.json()["code"] == "database_unavailable", r.text
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def test_the_openai_client_uploading_with_a_wrong_key_is_told_so_not_reset(server: tuple) -> None:
    """A client in the wild sends its whole upload before it reads: the API's early 401 and close reach it while
    the body is still on the wire, and the client must still read the 401 (httpcore reads the answer after a
    write that the close cut short), not report a broken connection."""
    openai = pytest.importorskip("openai")
    srv, _, folders = server
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="vlb_not-a-key", max_retries=0, timeout=ANSWER_WAIT)
    with pytest.raises(openai.AuthenticationError) as refused:
        client.files.create(file=("big.jsonl", b"x" * (24 * 1024 * 1024)), purpose="batch")
    assert refused.value.status_code == 401 and "unauthorized" in str(refused.value.body)
    assert disk_bytes(*folders) < 1024 * 1024
