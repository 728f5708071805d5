"""Prints what the service costs at album scale, one table per database (SQLite and PostgreSQL).

For each database, with a real ``vlbatch api`` process (its resident memory sampled from ``/proc``):

- accept: a job over a server-side folder of ITEMS files (``POST /v1/jobs/tagging`` with ``directory``; the files
  are empty, the walk and the insert are what is timed) and a job of ITEMS NDJSON item lines streamed to
  ``POST /v1/jobs/ndjson``: seconds from the request to the 201, items/s, and the API's peak RSS meanwhile;
- claims: the claim latency p50/p99 at each count of queued jobs in JOBS over TENANTS tenants, from
  ``benchmarks.claim_latency.measure``, each on a fresh database of its own;
- export: the folder job's items given results (one SQL statement, not the worker's writer; on PostgreSQL the
  tables then vacuumed, as autovacuum leaves them while a real job's results land), then read back as
  JSONL, CSV and Parquet through the API (``GET /v1/jobs/{id}/results.*``, bytes counted as they stream) and through
  the CLI's writer (``jobs.exports.files.write_export`` to a file): rows/s each, and the API's peak RSS;
- size: the database's bytes per item (PostgreSQL: ``pg_database_size``; SQLite: the file and its WAL), with the
  two jobs' items and the results in it.

Usage (the lead's run: ``--items 1000000``; this file's own check: ``--items 20000``):

    python -m benchmarks.scale --items 20000 --jobs 10,1000 --tenants 100 \
        --postgresql postgresql+psycopg://postgres@127.0.0.1:5432/postgres --broker-url redis://127.0.0.1:6380/60

``--postgresql`` names a server database to connect to: a database of its own is made there for the run and
dropped after. ``--no-sqlite`` skips SQLite. The files go under ``--work`` (default: a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from benchmarks.api_memory import peak_rss
from benchmarks.harness.children import api_process, child_env
from vlbatch.db.tags import merged_tags

FILES_PER_FOLDER = 1000
EXPORT_FORMATS = ("jsonl", "csv", "parquet")


def write_folder(root: Path, n: int) -> None:
    """``n`` empty ``.jpg`` files under ``root``, a thousand a folder (an album's shape)."""
    for k in range(n):
        folder = root / f"d{k // FILES_PER_FOLDER:05d}"
        if k % FILES_PER_FOLDER == 0:
            folder.mkdir(parents=True)
        (folder / f"{k % FILES_PER_FOLDER:04d}.jpg").touch()


def ndjson_body(root: Path, n: int, *, chunk_bytes: int = 256 * 1024) -> Iterator[bytes]:
    """The NDJSON upload of ``n`` items, made as it is sent: the head, then one item a line."""
    parts = [json.dumps({"pipeline": "image_tagging", "options": {"max_tags": 10}}) + "\n"]
    size = len(parts[0])
    for k in range(n):
        line = f'{{"images": ["{root}/n{k:07d}.jpg"], "ref": "r{k}"}}\n'
        parts.append(line)
        size += len(line)
        if size >= chunk_bytes:
            yield "".join(parts).encode()
            parts, size = [], 0
    if parts:
        yield "".join(parts).encode()


@contextmanager
def database(kind: str, server_url: str | None, work: Path) -> Iterator[str]:
    """A fresh database's URL: a SQLite file under ``work``, or a database made on the PostgreSQL server (dropped
    after)."""
    if kind == "sqlite":
        yield f"sqlite:///{work / 'scale.db'}"
        return
    assert server_url is not None
    name = f"vlbatch_scale_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    base, _, _ = server_url.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


def api_key(url: str) -> str:
    from vlbatch.db.keys import create_key
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    migrate(url)
    engine = make_engine(url)
    with make_sessionmaker(engine)() as session:
        secret = create_key(session, tenant="bench").secret
        session.commit()
    engine.dispose()
    return secret


def timed_post(client: httpx.Client, pid: int, path: str, **kwargs: Any) -> tuple[dict[str, Any], float, float]:
    """(answer, seconds, the API's peak RSS in MiB) of one POST."""
    start = time.monotonic()
    with peak_rss(pid) as peak:
        r = client.post(path, **kwargs)
    seconds = time.monotonic() - start
    if r.status_code != 201:
        raise RuntimeError(f"POST {path}: {r.status_code} {r.text[:500]}")
    return r.json(), seconds, peak.peak_mib


def give_results(url: str, job_id: str) -> None:
    """Every item of the job succeeded with a tagging answer, written in two statements (the export is measured, not
    the writer)."""
    answer = {"tags": ["beach", "sunset", "people", "sea", "sky"], "caption": "a picture"}
    output, tags = json.dumps(answer), json.dumps(merged_tags(answer, []))  # as the outcome writer stores them
    engine = create_engine(url)
    as_json = "CAST(:{} AS json)" if engine.dialect.name == "postgresql" else ":{}"
    now = "now()" if engine.dialect.name == "postgresql" else "CURRENT_TIMESTAMP"
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO results (item_id, job_id, output, tags, raw_text, prompt_tokens, completion_tokens, "
                f"model, pipeline_version, options_hash, created_at) SELECT id, job_id, {as_json.format('output')}, "
                f"{as_json.format('tags')}, :raw, 120, 14, 'tiny', '1', 'h', {now} FROM items "
                "WHERE job_id = :job"
            ),
            {"output": output, "tags": tags, "raw": output, "job": job_id},
        )
        conn.execute(
            text("UPDATE items SET status = 'succeeded', written_seq = seq WHERE job_id = :job"), {"job": job_id}
        )
    if engine.dialect.name == "postgresql":
        # A job's results land over the hours it runs, and autovacuum keeps up with them; these two statements
        # leave a million dead item rows and unvacuumed results, which autovacuum would otherwise be cleaning up
        # while the exports run (on the same two cores). The tables are left as autovacuum leaves them.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE items, results"))
    engine.dispose()


def api_export(client: httpx.Client, pid: int, job_id: str, fmt: str) -> tuple[float, int, float]:
    """(seconds, bytes, the API's peak RSS in MiB) of one export read over HTTP as it streams."""
    start, size = time.monotonic(), 0
    with peak_rss(pid) as peak, client.stream("GET", f"/v1/jobs/{job_id}/results.{fmt}") as r:
        r.raise_for_status()
        for chunk in r.iter_raw():
            size += len(chunk)
    return time.monotonic() - start, size, peak.peak_mib


def cli_export(url: str, job_id: str, fmt: str, out: Path) -> tuple[float, int]:
    """(seconds, rows) of ``write_export`` to a file, as ``vlbatch tag --out`` writes it."""
    from jobs.exports.files import write_export
    from vlbatch.db.session import make_engine, make_sessionmaker

    engine = make_engine(url)
    start = time.monotonic()
    rows = write_export(make_sessionmaker(engine), job_id, out / f"results.{fmt}")
    seconds = time.monotonic() - start
    (out / f"results.{fmt}").unlink()
    engine.dispose()
    return seconds, rows


def db_bytes(url: str, work: Path) -> int:
    if url.startswith("sqlite"):
        return sum(p.stat().st_size for p in work.glob("scale.db*"))
    engine = create_engine(url)
    with engine.connect() as conn:
        size = int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())
    engine.dispose()
    return size


def claim_rows(kind: str, server_url: str | None, work: Path, jobs: list[int], tenants: int, claims: int) -> list[str]:
    """The claim latency rows, each count of queued jobs measured on a fresh database of its own
    (``claim_latency.measure`` seeds an empty one: its chunk ids start at 1)."""
    from benchmarks.claim_latency import measure

    rows = []
    for n in jobs:
        (work / f"claims-{n}").mkdir(parents=True, exist_ok=True)
        with database(kind, server_url, work / f"claims-{n}") as url:
            got = measure(url, n, tenants, claims)
        rows.append(
            f"| claim, {n} queued jobs / {tenants} tenants | p50 {got['p50_ms']:.2f} ms | p99 {got['p99_ms']:.2f} ms |"
        )
    return rows


def run(kind: str, args: argparse.Namespace, work: Path, say: Callable[[str], None]) -> None:
    with database(kind, args.postgresql, work) as url:
        root = work / "inputs"
        write_folder(root / "album", args.items)
        env = child_env(
            {
                "VLBATCH_DATABASE_URL": url,
                "VLBATCH_BROKER_URL": args.broker_url,
                "VLBATCH_ALLOWED_INPUT_ROOTS": str(root),
                "VLBATCH_DATA_DIR": str(work / "data"),
                "VLBATCH_MODEL_NAME": "tiny",
                "VLBATCH_AUTH": "on",
                "VLBATCH_MAX_ITEMS_PER_JOB": str(max(args.items, 1) * 2),
                "VLBATCH_LOG_LEVEL": "WARNING",
            }
        )
        headers = {"Authorization": f"Bearer {api_key(url)}"}
        say(f"\n## {kind}: {args.items} items\n\n| what | figure | |\n| --- | --- | --- |")
        with (
            api_process(env, work / "api.log") as api,
            httpx.Client(base_url=api.base, headers=headers, timeout=3600) as client,
        ):
            folder_job, seconds, peak = timed_post(
                client, api.pid, "/v1/jobs/tagging", json={"directory": str(root / "album")}
            )
            assert folder_job["total"] == args.items, folder_job
            say(
                f"| accept folder job | {seconds:.1f} s ({args.items / seconds:,.0f} items/s) "
                f"| API peak RSS {peak:.0f} MiB |"
            )
            ndjson_job, seconds, peak = timed_post(
                client,
                api.pid,
                "/v1/jobs/ndjson",
                content=ndjson_body(root, args.items),
                headers={"Content-Type": "application/x-ndjson"},
            )
            assert ndjson_job["total"] == args.items, ndjson_job
            say(
                f"| accept NDJSON job | {seconds:.1f} s ({args.items / seconds:,.0f} items/s) "
                f"| API peak RSS {peak:.0f} MiB |"
            )
            give_results(url, folder_job["id"])
            for fmt in EXPORT_FORMATS:
                seconds, size, peak = api_export(client, api.pid, folder_job["id"], fmt)
                say(
                    f"| export {fmt}, API | {args.items / seconds:,.0f} rows/s ({size / 1e6:.1f} MB) "
                    f"| API peak RSS {peak:.0f} MiB |"
                )
        for fmt in EXPORT_FORMATS:
            seconds, rows = cli_export(url, folder_job["id"], fmt, work)
            say(f"| export {fmt}, CLI writer | {rows / seconds:,.0f} rows/s | |")
        size = db_bytes(url, work)
        say(
            f"| database size | {size / (2 * args.items):,.0f} bytes/item "
            f"| {size / 1e6:.0f} MB, 2 jobs, results of one |"
        )
        for row in claim_rows(kind, args.postgresql, work, args.jobs, args.tenants, args.claims):
            say(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], prog="python -m benchmarks.scale")
    parser.add_argument("--items", type=int, default=20_000, help="items per job (default: %(default)s)")
    parser.add_argument(
        "--jobs", default="10,1000,10000", help="queued-job counts for the claim rows (default: %(default)s)"
    )
    parser.add_argument("--tenants", type=int, default=100, help="tenants the queued jobs belong to")
    parser.add_argument("--claims", type=int, default=500, help="claims timed per row (default: %(default)s)")
    parser.add_argument("--postgresql", help="a PostgreSQL server database URL (a run database is made beside it)")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/12", help="the API's broker")
    parser.add_argument("--work", type=Path, help="where the files and the SQLite database go (default: a temp dir)")
    args = parser.parse_args()
    args.jobs = [int(n) for n in args.jobs.split(",") if n.strip()]
    kinds = ([] if args.no_sqlite else ["sqlite"]) + (["postgresql"] if args.postgresql else [])
    if not kinds:
        parser.error("nothing to run: give --postgresql, or leave out --no-sqlite")
    for kind in kinds:
        with tempfile.TemporaryDirectory(dir=args.work) as tmp:
            run(kind, args, Path(tmp), lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
