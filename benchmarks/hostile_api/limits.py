"""Hostile-client probes: bounds set by configuration, on the server, a tenant's uploads, the dashboard's cookie and
headers, and an embedded engine's memory on a CPU host.

- a request head of 64 MiB, and one of 20,000 header fields, against ``vlbatch api`` (h11's head bound);
- 20 concurrent uploads of 10 MiB by one tenant against a total of 50 MiB held;
- a dashboard login through a TLS proxy the API trusts (127.0.0.2 here, as ``VLBATCH_TRUSTED_PROXIES`` says),
  a login posted from another origin, and the ``/ui`` pages' caching and sniffing headers;
- the KV cache ``vlbatch tag`` would give its engine on this host for the shipped ~1M-parameter model, beside
  what vLLM's own sizing (``gpu_memory_utilization`` of all RAM) would take. No engine is loaded.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path

import httpx

from benchmarks.hostile_api import Row, Target

MiB = 1024**2
DEMO_MODEL = Path(__file__).parents[2] / "cli" / "assets" / "tiny-tagger-qwen2-vl"  # what ``vlbatch demo`` runs
UPLOADS, UPLOAD_BYTES, HELD_BYTES = 20, 10 * MiB, 50 * MiB
ENV: dict[str, str] = {
    "VLBATCH_API_RECONCILE": "false",
    "VLBATCH_TRUSTED_PROXIES": "127.0.0.2",
    "VLBATCH_TENANT_MAX_UPLOAD_TOTAL_BYTES": str(HELD_BYTES),
}


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def _raw(base: str, head_start: bytes, filler: bytes, total: int) -> tuple[str, int, float]:
    """Sends ``head_start`` then ``filler`` up to ``total`` bytes; (the status line, bytes sent, seconds)."""
    host, port = base.removeprefix("http://").split(":")
    started, sent = time.monotonic(), 0
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        try:
            sock.sendall(head_start)
            while sent < total:
                sock.sendall(filler)
                sent += len(filler)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        with suppress(ConnectionResetError, TimeoutError):
            while data := sock.recv(65536):
                answer += data
    return (answer.split(b"\r\n", 1)[0].decode() or "(closed, no answer)"), sent, time.monotonic() - started


def _head_probes(target: Target) -> Iterator[Row]:
    before = _rss(target.pid)
    status, sent, took = _raw(target.base, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ", b"a" * 65536, 64 * MiB)
    grown = (_rss(target.pid) - before) / MiB
    yield Row(
        "M5 one 64 MiB header, no key",
        "GET /healthz, X-Big: 64 MiB",
        f"{status} after {took:.1f} s ({sent / MiB:.0f} MiB pushed before the close); API RSS {grown:+.0f} MiB",
        status.startswith("HTTP/1.1 400") and grown < 64,
    )
    fields = b"".join(b"X-H%d: 1\r\n" % i for i in range(20_000))
    status, _, took = _raw(target.base, b"GET /healthz HTTP/1.1\r\nHost: x\r\n", fields + b"\r\n", len(fields))
    got = f"{status} after {took:.1f} s"
    yield Row("M5 20,000 headers, no key", "GET /healthz, 20,000 fields", got, status.startswith("HTTP/1.1 400"))
    r = httpx.get(f"{target.base}/healthz", headers=[(f"X-H{i}", "1") for i in range(150)], timeout=30)
    yield Row(
        "M5 150 small headers",
        "GET /healthz, 150 fields in 2 KB",
        f"{r.status_code} {r.json().get('code')}",
        r.status_code == 431 and r.json().get("code") == "too_many_headers",
    )


def _upload_probe(target: Target) -> Row:
    def upload(i: int) -> httpx.Response:
        with httpx.Client(base_url=target.base, headers=target.headers("b"), timeout=120) as client:
            files = {"file": (f"{i}.jsonl", b"x" * UPLOAD_BYTES)}
            return client.post("/v1/files", files=files, data={"purpose": "batch"})

    started = time.monotonic()
    with ThreadPoolExecutor(UPLOADS) as pool:
        answers = list(pool.map(upload, range(UPLOADS)))
    took = time.monotonic() - started
    kept = sum(r.status_code == 200 for r in answers)
    refused = {f"{r.status_code} {r.json().get('code')}" for r in answers if r.status_code != 200}
    with httpx.Client(base_url=target.base, headers=target.headers("b"), timeout=30) as client:
        held = sum(f["bytes"] for f in client.get("/v1/files").json()["data"])
    return Row(
        "M6 20 concurrent uploads of 10 MiB",
        f"POST /v1/files x {UPLOADS}, tenant total {HELD_BYTES // MiB} MiB",
        f"{kept} kept ({held / MiB:.0f} MiB held), the rest {', '.join(sorted(refused))}, in {took:.1f} s",
        held <= HELD_BYTES and refused == {"413 uploads_held_quota_exceeded"},
    )


def _dashboard_probes(target: Target) -> Iterator[Row]:
    key = target.tenant_keys["a"]
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    for via, trusted in (("127.0.0.2", True), ("127.0.0.1", False)):
        transport = httpx.HTTPTransport(local_address=via)
        with httpx.Client(base_url=target.base, transport=transport, timeout=30) as client:
            r = client.post("/ui/login", data={"key": key}, headers=forwarded, follow_redirects=False)
        secure = "secure" in r.headers.get("set-cookie", "").lower().split("; ")
        yield Row(
            f"L2 login through {'a trusted' if trusted else 'an untrusted'} TLS proxy",
            f"POST /ui/login from {via}, X-Forwarded-Proto: https",
            f"{r.status_code}, cookie {'Secure' if secure else 'not Secure'}",
            r.status_code == 303 and secure == trusted,
        )
    r = httpx.post(f"{target.base}/ui/login", data={"key": key}, headers={"Origin": "https://evil.example"})
    yield Row(
        "L3 login CSRF, no Sec-Fetch-Site",
        "POST /ui/login, Origin: https://evil.example",
        f"{r.status_code} {r.json().get('code') if r.status_code == 403 else ''}",
        r.status_code == 403 and "set-cookie" not in r.headers,
    )
    r = httpx.get(f"{target.base}/ui/login", timeout=30)
    got = f"nosniff={r.headers.get('x-content-type-options')}, cache-control={r.headers.get('cache-control')}"
    yield Row(
        "L3 /ui headers",
        "GET /ui/login",
        got,
        r.headers.get("x-content-type-options") == "nosniff" and r.headers.get("cache-control") == "no-store",
    )


def _kv_probe() -> Row:
    from engine.planning.host_fit import engine_for_host
    from engine.platforms.cpu_host import available_memory_bytes, memory_bytes
    from vlbatch.settings import Settings

    engine = engine_for_host(Settings(platform="cpu"), DEMO_MODEL).runtime.engine
    kv = int(str(engine.get("kv_cache_memory_bytes", 0)))
    vllm_own = 0.85 * memory_bytes() / MiB  # EngineConfig's gpu_memory_utilization default, of all RAM
    return Row(
        "L7 vlbatch tag on a CPU host, no --engine",
        f"the shipped ~1M-parameter model; MemAvailable {available_memory_bytes() / MiB:.0f} MiB",
        f"kv_cache_memory_bytes {kv / MiB:.1f} MiB (vLLM's own sizing: up to {vllm_own:.0f} MiB)",
        0 < kv <= 0.25 * available_memory_bytes(),
    )


def probes(target: Target) -> Iterator[Row]:
    yield from _head_probes(target)
    yield _upload_probe(target)
    yield from _dashboard_probes(target)
    yield _kv_probe()
