"""Hostile-client probes: bodies, uploads and batch inputs. Rows are added beside the fixes they check.

Disk figures of an upload are the API process's own: ``write_bytes`` of ``/proc/<pid>/io`` (what it handed the
storage layer, unlinked temporary files included) and the growth of its data dir; memory is its RSS.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from benchmarks.hostile_api import Row, Target

MB = 1024 * 1024
UPLOAD_CAP = 32 * MB  # room for the 20 MB batch line; a 1 GB upload with a key is cut off here
ENV: dict[str, str] = {"VLBATCH_MAX_UPLOAD_BYTES": str(UPLOAD_CAP)}
BOUNDARY = "hostileboundary"


def _disk_written(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _dir_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def _multipart_head(name: bytes = b"big.jsonl") -> bytes:
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="'.encode()
        + name
        + b'"\r\nContent-Type: application/octet-stream\r\n\r\n'
    )


def _stream_post(target: Target, path: str, headers: dict[str, str], total: int, *, chunked: bool) -> tuple[str, int]:
    """POST up to ``total`` body bytes on a raw socket while a thread reads the answer: (status line, bytes sent
    before the API answered or hung up)."""
    host, port = target.base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    head = [f"POST {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}")
    answer = bytearray()
    answered = threading.Event()

    def read() -> None:
        try:
            while piece := sock.recv(65536):
                answer.extend(piece)
                if b"\r\n\r\n" in answer:
                    answered.set()
        except OSError:
            pass
        answered.set()

    reader = threading.Thread(target=read, daemon=True)
    sent = 0
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        reader.start()
        first = _multipart_head() if path == "/v1/files" else b"["
        piece = b"x" * MB
        while sent < total and not answered.is_set():
            data = first if sent == 0 else piece
            sock.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data)
            sent += len(data)
        answered.wait(30)
    except OSError:
        answered.wait(30)
    finally:
        sock.close()
    status = bytes(answer).split(b"\r\n", 1)[0].decode(errors="replace") or "no answer"
    body = bytes(answer).partition(b"\r\n\r\n")[2]
    answer_code = json.loads(body).get("code") if body.startswith(b"{") else None
    return f"{status} {answer_code or ''}".strip(), sent


def _upload_probe(target: Target, defect: str, sent: str, headers: dict[str, str], *, chunked: bool) -> Row:
    before_disk, before_dir = _disk_written(target.pid), _dir_bytes(target.data_dir)
    status, n_sent = _stream_post(target, "/v1/files", headers, 1024**3, chunked=chunked)
    time.sleep(0.5)  # a refused upload's partial file is removed just after the answer
    written = _disk_written(target.pid) - before_disk
    grown = _dir_bytes(target.data_dir) - before_dir
    # Without a key nothing may reach the disk; with one, at most the cap, and nothing kept once refused.
    want, most = ("401", MB) if "no key" in sent else ("413", UPLOAD_CAP + MB)
    got = f"{status}; {n_sent / MB:.0f} MB sent before the answer; API wrote {written} B to disk, data dir +{grown} B"
    return Row(defect, sent, got, f" {want} " in status and written < most and grown == 0)


def _post(client: httpx.Client, path: str, body: bytes) -> httpx.Response:
    return client.post(path, content=body, headers={"Content-Type": "application/json"})


def _code(r: httpx.Response) -> str:
    try:
        return f"{r.status_code} {r.json().get('code', '(no code)')}"
    except ValueError:
        return f"{r.status_code} (not JSON)"


def _chat(custom_id: str, **body: Any) -> dict[str, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **body}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def _upload(client: httpx.Client, content: bytes, name: str = "in.jsonl") -> str:
    r = client.post("/v1/files", files={"file": (name, content)}, data={"purpose": "batch"})
    r.raise_for_status()
    return str(r.json()["id"])


def _batch(client: httpx.Client, file_id: str, **fields: Any) -> httpx.Response:
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h", **fields}
    return client.post("/v1/batches", json=body)


def probes(target: Target) -> Iterator[Row]:
    multipart = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    yield _upload_probe(
        target, "D1 unauthenticated 1 GB upload", "POST /v1/files, no key, 1 GiB", multipart, chunked=False
    )
    yield _upload_probe(
        target,
        "D1 unauthenticated 1 GB upload, chunked",
        "POST /v1/files, no key, 1 GiB chunked",
        multipart,
        chunked=True,
    )
    keyed = {**multipart, **target.headers()}
    yield _upload_probe(
        target, "D1 1 GB upload over the cap", "POST /v1/files, key, 1 GiB declared", keyed, chunked=False
    )
    yield _upload_probe(
        target, "D1 1 GB upload over the cap, chunked", "POST /v1/files, key, 1 GiB chunked", keyed, chunked=True
    )

    status, n_sent = _stream_post(
        target, "/v1/jobs/tagging", {"Content-Type": "application/json"}, 12 * MB, chunked=False
    )
    yield Row(
        "D27 unauthenticated 12 MB JSON",
        "POST /v1/jobs/tagging, no key, 12 MB",
        f"{status} after {n_sent / MB:.0f} MB sent",
        " 401 " in status and n_sent < 12 * MB,
    )

    with httpx.Client(base_url=target.base, headers=target.headers(), timeout=120) as client:
        yield from _json_probes(target, client)
        yield from _batch_probes(target, client)
        yield from _file_probes(target, client)


def _json_probes(target: Target, client: httpx.Client) -> Iterator[Row]:
    keys = ",".join(f'"k{i}": 1' for i in range(1_000_000))
    body = f'{{"items": [{{"images": ["/a.jpg"]}}], "options": {{{keys}}}}}'.encode()
    rss, start = _rss(target.pid), time.monotonic()
    r = _post(client, "/v1/jobs/tagging", body)
    took, grew = time.monotonic() - start, _rss(target.pid) - rss
    yield Row(
        "D4 10^6 option keys",
        f"POST /v1/jobs/tagging, {len(body) / MB:.0f} MB, 10^6 option keys",
        f"{_code(r)}, {len(r.content)} B answer in {took:.1f} s, API RSS +{grew / MB:.0f} MB",
        r.status_code == 422 and len(r.content) < 10_000,
    )
    r = client.post("/v1/jobs/tagging", json={"items": [{"images": "x"} for _ in range(50_000)]})
    listed = len(r.json().get("detail", [])) if r.status_code == 422 else -1
    yield Row(
        "D4 validation errors echoed",
        "50,000 bad items",
        f"{_code(r)}, {listed} faults listed, {len(r.content)} B",
        r.status_code == 422 and 0 < listed <= 21,
    )
    r = _post(client, "/v1/jobs/tagging", b"[" * 100_000 + b"]" * 100_000)
    yield Row("D26 deep JSON", "10^5-deep JSON array", _code(r), r.status_code == 400 and "unparsable_body" in r.text)
    for number in ("NaN", "Infinity", "1e400"):
        r = _post(client, "/v1/jobs/tagging", f'{{"items": [{{"images": ["/a.jpg"]}}], "model": {number}}}'.encode())
        yield Row(f"D11 {number} in a 422 echo", f'"model": {number}', _code(r), r.status_code == 422)


def _batch_probes(target: Target, client: httpx.Client) -> Iterator[Row]:
    long_line = json.dumps(_chat("long", messages=[{"role": "user", "content": "x" * (20 * MB)}]))
    file_id = _upload(client, (json.dumps(_chat("a")) + "\n" + long_line + "\n").encode())
    rss = _rss(target.pid)
    r = _batch(client, file_id)
    grew = _rss(target.pid) - rss
    errors = {e["line"]: e["code"] for e in (r.json().get("errors") or {}).get("data", [])} if r.is_success else {}
    yield Row(
        "D3 20 MB batch line",
        "a 20 MB line beside a good one",
        f"{_code(r) if not r.is_success else r.status_code} line 2 {errors.get(2)}, API RSS +{grew / MB:.0f} MB",
        r.is_success and errors == {2: "batch_line_too_long"},
    )
    lines = [
        json.dumps(_chat("ok")),
        '{"custom_id": "\\ud800", "method": "POST", "url": "/v1/chat/completions", "body": {}}',
        '{"custom_id": "a\\u0000b", "method": "POST", "url": "/v1/chat/completions", "body": {}}',
        json.dumps(_chat("nan")).replace('"max_tokens": 4', '"max_tokens": 4, "temperature": NaN'),
    ]
    r = _batch(client, _upload(client, "\n".join(lines).encode()))
    counts = r.json().get("request_counts") if r.is_success else None
    yield Row(
        "D10 bad batch lines fail alone",
        "lone-surrogate and NUL custom_id, NaN",
        f"{r.status_code} {counts}",
        r.is_success and counts == {"total": 4, "completed": 0, "failed": 3},
    )
    one = _upload(client, json.dumps(_chat("a")).encode())
    r = _batch(client, one, completion_window="99999999999999999999h")
    yield Row("D17 completion_window overflow", "99999999999999999999h", _code(r), r.status_code == 422)
    r = _batch(client, one, metadata={"k": "v" * 513})
    yield Row("batch metadata value cap", "a 513-character value", _code(r), r.status_code == 422)
    many = "\n".join(json.dumps(_chat(f"id-{i}")) for i in range(50_001)).encode()
    r = _batch(client, _upload(client, many))
    yield Row(
        "batch line count cap", "50,001 lines", _code(r), r.status_code == 422 and "too_many_batch_lines" in r.text
    )


def _file_probes(target: Target, client: httpx.Client) -> Iterator[Row]:
    files = target.data_dir / "files"
    before = _dir_bytes(files)
    body = _multipart_head(b"a\x00b.jsonl") + b"{}\r\n--" + BOUNDARY.encode() + b"--\r\n"
    r = client.post("/v1/files", content=body, headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    grown = _dir_bytes(files) - before
    yield Row(
        "D9 NUL in a file name",
        'filename="a\\0b.jsonl"',
        f"{_code(r)}, data dir +{grown} B",
        r.status_code == 422 and grown == 0,
    )

    stored = {p.name for p in files.iterdir()}
    file_id = _upload(client, json.dumps(_chat("a")).encode())
    for path in files.iterdir():  # this file's bytes go, as on an API replica with a data dir of its own
        if path.name not in stored:
            path.unlink()
    got = [_code(client.get(f"/v1/files/{file_id}/content")), _code(_batch(client, file_id))]
    yield Row("D21 file bytes missing", "content, then a batch", " / ".join(got), all(g.startswith("410") for g in got))

    # Last: the files table goes, so the row of any upload fails (the API serves no other file after this).
    before = _dir_bytes(files)
    with sqlite3.connect(target.data_dir.parent / "vlbatch.db") as db:
        db.execute("DROP TABLE files")
    r = client.post("/v1/files", files={"file": ("in.jsonl", b"{}")}, data={"purpose": "batch"})
    grown = _dir_bytes(files) - before
    yield Row(
        "D9 upload whose row fails",
        "files table gone",
        f"{_code(r)}, data dir +{grown} B",
        r.status_code >= 500 and grown == 0,
    )
