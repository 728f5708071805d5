"""Hostile-client probes: dry runs. Tenants ``a`` and ``b`` read ``<root>/a`` and ``<root>/ab`` (prefix siblings);
each probe sends what a hostile client would to ``"dry_run": true`` and checks that the API opens nothing outside
the tenant's roots, never blocks, decodes no pixels, parses a batch file as a stream and limits the work one dry
run and one tenant may ask of it. Memory is the API process's RSS (``benchmarks.api_memory``)."""

from __future__ import annotations

import base64
import io
import json
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from PIL import Image

from benchmarks.api_memory import peak_rss
from benchmarks.hostile_api import Row, Target, status_and_code
from vlbatch.db import tenants
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings

MAX_FILES = 50
ENV: dict[str, str] = {"VLBATCH_MODEL_NAME": "tiny", "VLBATCH_DRY_RUN_MAX_FILES": str(MAX_FILES)}
MIB = 1024 * 1024


def png_exif_after_idat(size: int) -> bytes:
    """A black SIZE x SIZE PNG (a few hundred KB: black compresses) with an eXIf chunk after its IDAT."""
    buf = io.BytesIO()
    Image.new("L", (size, size)).save(buf, "PNG", compress_level=9)
    data = buf.getvalue()
    exif = Image.Exif()
    exif[0x0112] = 6
    payload = exif.tobytes()
    chunk = struct.pack(">I", len(payload)) + b"eXIf" + payload + struct.pack(">I", zlib.crc32(b"eXIf" + payload))
    return data[:-12] + chunk + data[-12:]  # before IEND


def _prepare(target: Target) -> None:
    for name in ("a", "ab"):
        (target.root / name).mkdir(exist_ok=True)
        Image.new("RGB", (640, 480), (90, 60, 30)).save(target.root / name / "photo.jpg")
    settings = Settings(database_url=f"sqlite:///{target.data_dir.parent / 'vlbatch.db'}")
    settings = settings.model_copy(update={"allowed_input_roots": [target.root]})
    engine = make_engine(settings.database.database_url)
    with make_sessionmaker(engine)() as s:
        tenants.set_roots(s, settings, tenant="a", inputs=[str(target.root / "a")])
        tenants.set_roots(s, settings, tenant="b", inputs=[str(target.root / "ab")])
        s.commit()
    engine.dispose()


def _got(r: httpx.Response) -> str:
    return status_and_code(r, otherwise="visual_tokens")


def _dry(client: httpx.Client, *images: str) -> httpx.Response:
    return client.post("/v1/jobs/tagging", json={"items": [{"images": [i]} for i in images], "dry_run": True})


def probes(target: Target) -> Iterator[Row]:
    _prepare(target)
    with httpx.Client(base_url=target.base, timeout=60, headers=target.headers("a")) as a:
        yield from _h1(a, target.root)
        yield from _h2(a, target)
        yield from _h3(target)
        yield from _h4(a, target)
        yield from _l5(a, target)


def _h1(a: httpx.Client, root: Path) -> Iterator[Row]:
    paths = [root / "ab" / "photo.jpg", root / "ab" / "none.jpg", Path("/etc/hostname"), Path("/etc/none.jpg")]
    answers = []
    for path in paths:
        r = _dry(a, str(path))
        detail = str(r.json().get("detail", "")).replace(str(path), "P")
        answers.append((_got(r), detail))
    same = len(set(answers)) == 1 and answers[0][0] == "422 input_path_refused"
    sent = "a: <root>/ab/photo.jpg, ab/none.jpg, /etc/hostname, /etc/none.jpg"
    got = " | ".join(sorted({g for g, _ in answers})) + f"; same answer: {same}"
    yield Row("H1 dry run of a path outside the tenant's roots", sent, got, same)
    own = _dry(a, str(root / "a" / "photo.jpg"))
    yield Row("H1 own root still estimated", "a: <root>/a/photo.jpg (640x480)", _got(own), _got(own) == "200 234")


def _h2(a: httpx.Client, target: Target) -> Iterator[Row]:
    fifo = target.root / "a" / "pipe.jpg"
    os.mkfifo(fifo)
    try:
        start = time.monotonic()
        with ThreadPoolExecutor(15) as pool:
            got = list(pool.map(lambda _: _got(_dry(a, str(fifo))), range(15)))
        took = time.monotonic() - start
        fd_answer = _got(_dry(a, "/proc/self/fd/0"))
        ready = httpx.get(f"{target.base}/readyz", timeout=10).status_code
        jobs = a.get("/v1/jobs").status_code
    finally:
        os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))  # a reader left waiting, if any, gets its EOF
    # Each is answered at once: read as nothing (a FIFO is no regular file), or refused past the tenant's dry-run slots.
    answered = "200 0" in got and set(got) <= {"200 0", "429 dry_run_busy"}
    ok = took < 10 and answered and fd_answer == "422 input_path_refused" and ready == jobs == 200
    yield Row("H2 FIFO and /proc/self/fd dry runs", "15 x <root>/a/pipe.jpg (a FIFO) at once; /proc/self/fd/0",
              f"{sorted(set(got))} in {took:.1f} s; fd: {fd_answer}; /readyz {ready}, /v1/jobs {jobs}", ok)  # fmt: skip


def _h3(target: Target) -> Iterator[Row]:
    url = "data:image/png;base64," + base64.b64encode(png_exif_after_idat(13000)).decode()
    body = {"items": [{"images": [url]}], "dry_run": True}

    def one(_: int) -> str:
        r = httpx.post(f"{target.base}/v1/jobs/tagging", json=body, headers=target.headers("b"), timeout=120)
        return _got(r)

    with peak_rss(target.pid) as peak, ThreadPoolExecutor(2) as pool:  # two: the tenant's dry-run slots
        got = sorted(set(pool.map(one, range(6))))
    grew = peak.peak_mib - peak.before_mib
    sent = f"6 dry runs, 2 at once ({len(url) / MIB:.1f} MiB each)"
    said = f"{got}; API RSS +{grew:.0f} MiB (peak {peak.peak_mib:.0f})"
    yield Row("H3 13000x13000 PNG data URL, eXIf after IDAT", sent, said, got == ["200 256"] and grew < 100)


def _batch_file(lines: int) -> bytes:
    out = []
    for n in range(lines):
        schema = {"type": "object", "examples": [[]] * (1_000_000 // 4)}
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}}  # fmt: skip
        out.append(json.dumps({"custom_id": str(n), "method": "POST", "url": "/v1/chat/completions", "body": body}))
    return ("\n".join(out) + "\n").encode()


def _upload(client: httpx.Client, data: bytes) -> str:
    r = client.post("/v1/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", data)})
    r.raise_for_status()
    return str(r.json()["id"])


def _h4(a: httpx.Client, target: Target) -> Iterator[Row]:
    lines = 16
    file_id = _upload(a, _batch_file(lines))
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    got, grew = [], []
    for extra in ({"dry_run": True}, {}):
        with peak_rss(target.pid) as peak:
            r = a.post("/v1/batches", json={**body, **extra}, timeout=600)
        got.append(f"{r.status_code} {r.json().get('items') or r.json().get('request_counts', {}).get('total')}")
        grew.append(peak.peak_mib - peak.before_mib)
    # Held whole, 16 such lines take some 400 MB more (24 bytes a byte); streamed, one line's worth at a time.
    ok = got == [f"200 {lines}"] * 2 and max(grew) < 250
    yield Row("H4 batch of 1 MB lines full of []", f"{lines} lines ({lines} MB): dry run, then create",
              f"{', '.join(got)}; API RSS +{grew[0]:.0f} / +{grew[1]:.0f} MiB", ok)  # fmt: skip


def _l5(a: httpx.Client, target: Target) -> Iterator[Row]:
    folder = target.root / "a" / "many"
    folder.mkdir()
    photo = (target.root / "a" / "photo.jpg").read_bytes()
    for i in range(4 * MAX_FILES):
        (folder / f"{i:04}.jpg").write_bytes(photo)
    r = a.post("/v1/jobs/tagging", json={"directory": str(folder), "dry_run": True})
    e = r.json()
    said = any(f"{MAX_FILES} of {4 * MAX_FILES} images" in w for w in e.get("warnings", []))
    ok = r.status_code == 200 and said and e.get("visual_tokens") == 4 * MAX_FILES * 234
    yield Row("L5 dry run over more files than it reads", f"a: folder of {4 * MAX_FILES} photos, "
              f"VLBATCH_DRY_RUN_MAX_FILES={MAX_FILES}", f"{r.status_code}, {e.get('visual_tokens')} tokens, "
              f"extrapolation said: {said}", ok)  # fmt: skip

    file_id = _upload(a, _batch_file(3))
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h", "dry_run": True}
    answers: list[str] = []
    other: list[str] = []
    go = threading.Barrier(7)

    def one(_: int) -> None:
        go.wait()
        answers.append(_got(a.post("/v1/batches", json=body, timeout=300)))

    def from_b() -> None:
        go.wait()
        with httpx.Client(base_url=target.base, timeout=60, headers=target.headers("b")) as b:
            other.append(_got(_dry(b, str(target.root / "ab" / "photo.jpg"))))

    with ThreadPoolExecutor(7) as pool:
        waits = [pool.submit(one, n) for n in range(6)] + [pool.submit(from_b)]
        for w in waits:
            w.result()
    busy = answers.count("429 dry_run_busy")
    ok = 1 <= busy <= 4 and set(answers) == {"200 0", "429 dry_run_busy"} and other == ["200 234"]
    yield Row("L5 a tenant's concurrent dry runs", "a: 6 batch dry runs at once (VLBATCH_DRY_RUN_CONCURRENCY=2); "
              "b: one meanwhile", f"a: {sorted(set(answers))}, {busy} refused; b: {other}", ok)  # fmt: skip
