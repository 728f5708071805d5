"""What one claim costs on PostgreSQL, in figures a loaded machine does not move: round trips, and the server's
buffer reads; with the server's execution time and the client's CPU time beside them.

The queue is ``claim_latency``'s (``jobs`` queued jobs over ``tenants`` tenants, one job in four with a deadline),
and so are the claims (``claim_order.claim_next`` in a session of its own, committed, then the chunk finished). For
each claim it counts the statements sent and the commit (the round trips), and, in a first pass, runs each
statement once more under ``EXPLAIN (ANALYZE, BUFFERS, TIMING OFF)`` inside a savepoint rolled back before the
statement itself runs: the shared buffers it touched (hit or read) and its execution time on the server. A second
pass on a fresh queue takes the client's CPU time per claim (``time.thread_time``), with no EXPLAIN in the way.

Usage: python benchmarks/claim_cost.py [--jobs 10 1000 10000] [--tenants 100] [--claims 200]
       [--pg-admin-url postgresql://127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from sqlalchemy import Engine, event

from benchmarks.claim_latency import LEASE, MODEL, WARMUP, _finish, _postgres, seed
from vlbatch.db import claim_order
from vlbatch.db.session import make_engine, make_sessionmaker, migrate

_EXPLAINABLE = ("SELECT", "WITH", "UPDATE", "INSERT", "DELETE")


@contextmanager
def _explained(engine: Engine, sink: list[tuple[int, float]]) -> Iterator[None]:
    """Each statement the engine sends, explained first (savepoint, EXPLAIN ANALYZE, rolled back): its shared
    buffers and execution time (ms) go to ``sink``."""

    def before(conn: Any, cursor: Any, statement: str, params: Any, _context: Any, _many: bool) -> None:
        if not statement.lstrip().upper().startswith(_EXPLAINABLE):
            return
        raw = conn.connection.dbapi_connection
        with raw.cursor() as cur:
            cur.execute("SAVEPOINT claim_cost")
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) " + statement, params)
            plan = cur.fetchone()[0]
            cur.execute("ROLLBACK TO SAVEPOINT claim_cost")
        top = (plan if isinstance(plan, list) else json.loads(plan))[0]
        sink.append((_buffers(top["Plan"]), top["Execution Time"]))

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", before)


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _buffers(top: dict[str, Any]) -> int:
    """The shared buffers a statement touched: its top node's, which include every node run under it, and those of
    the data-modifying CTEs no node reads, which PostgreSQL runs to completion after it."""

    def touched(node: dict[str, Any]) -> int:
        return int(node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0))

    nodes = list(_nodes(top))
    read = {n["CTE Name"] for n in nodes if n.get("Node Type") == "CTE Scan"}
    after = [n for n in nodes if n.get("Subplan Name", "").startswith("CTE ") and n["Subplan Name"][4:] not in read]
    return touched(top) + sum(touched(n) for n in after)


@contextmanager
def _counted(engine: Engine, sink: list[str]) -> Iterator[None]:
    def before(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        sink.append(statement)

    def commit(_conn: Any) -> None:
        sink.append("COMMIT")

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "commit", commit)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "commit", commit)


def _claims(db_url: str, jobs: int, tenants: int, claims: int, *, explain: bool) -> list[dict[str, float]]:
    migrate(db_url)
    engine = make_engine(db_url)
    sessions = make_sessionmaker(engine)
    rows: list[dict[str, float]] = []
    try:
        total = claims + WARMUP
        chunks = seed(sessions, jobs=jobs, tenants=min(tenants, jobs), chunks_per_job=max(2, -(-2 * total // jobs)))
        shares = claim_order.Shares()
        for k in range(total):
            sent: list[str] = []
            plans: list[tuple[int, float]] = []
            cpu = time.thread_time()
            with _counted(engine, sent), _explained(engine, plans) if explain else nullcontext(), sessions() as s:
                leased, _items = claim_order.claim_next(
                    s, delivered=chunks[k % len(chunks)], owner="bench", lease=LEASE, shares=shares, model=MODEL
                )
                s.commit()
            cpu = time.thread_time() - cpu
            if k >= WARMUP:
                rows.append(
                    {
                        "round_trips": len(sent),
                        "buffers": sum(b for b, _ in plans),
                        "server_ms": sum(t for _, t in plans),
                        "cpu_ms": cpu * 1e3,
                    }
                )
            if leased is not None:
                _finish(sessions, leased)
    finally:
        engine.dispose()
    return rows


def _p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[10, 1_000, 10_000], help="queued jobs per row")
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--claims", type=int, default=200, help="claims measured per row (default 200)")
    parser.add_argument("--pg-admin-url", default="postgresql://127.0.0.1:5432/test", help="where to make databases")
    args = parser.parse_args()
    print(
        "| queued jobs | tenants | round trips per claim (mean, max) | buffers p50 / p99 | server ms p50 / p99 "
        "| client CPU ms p50 / p99 |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for jobs in args.jobs:
        with _postgres(args.pg_admin_url) as url:
            explained = _claims(url, jobs, args.tenants, args.claims, explain=True)
        with _postgres(args.pg_admin_url) as url:
            plain = _claims(url, jobs, args.tenants, args.claims, explain=False)
        trips = [r["round_trips"] for r in plain]
        buffers = [r["buffers"] for r in explained]
        server = [r["server_ms"] for r in explained]
        cpu = [r["cpu_ms"] for r in plain]
        print(
            f"| {jobs:,} | {min(args.tenants, jobs)} | {statistics.mean(trips):.1f}, {max(trips)} "
            f"| {_p(buffers, 50):.0f} / {_p(buffers, 99):.0f} | {_p(server, 50):.2f} / {_p(server, 99):.2f} "
            f"| {_p(cpu, 50):.2f} / {_p(cpu, 99):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
