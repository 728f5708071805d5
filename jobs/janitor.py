"""The janitor: deletes what expired (``vlbatch.db.retention`` says what) in short transactions, one host at a time.

A pass takes the lease, then collects, each step its own transactions of at most ``VLBATCH_JANITOR_BATCH_ROWS``
rows: expired jobs (items, results, document parts, tag edits, chunks, telemetry, their batches, the job row, then
the job's cached thumbnails under ``<data_dir>/thumbs/<job>``), expired files (the row, then the bytes in the file
store), then each registered collector's aged rows (engine samples; delivered webhook rows once wired). The lease is
renewed between transactions, so a long pass keeps it and a dead host's lapses after ``LEASE_TTL``.

It runs on the API's own timer (``janitor_forever``, every ``VLBATCH_JANITOR_INTERVAL_S``), beside the API's
reconciler: the API process owns the data dir where file bytes and thumbnails live, so the rows and the bytes go
together. ``vlbatch gc`` runs a pass by hand; ``plan`` (``vlbatch gc --dry-run``) counts the same rows with the same
rule and deletes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from jobs.batches import store
from vlbatch.db import retention
from vlbatch.db.models import utcnow
from vlbatch.errors import JANITOR_BUSY, VlbatchError
from vlbatch.settings import Settings

log = logging.getLogger(__name__)

LEASE_TTL = timedelta(minutes=10)


@dataclass
class Report:
    """Rows per table and bytes (files, thumbnails, results' text) a pass deleted, or a dry run would."""

    rows: Counter[str] = field(default_factory=Counter)
    bytes: int = 0
    longest_transaction_s: float = 0.0
    transactions: int = 0
    unknown: list[str] = field(default_factory=list)  # collectors the dry run cannot count
    ran: bool = True  # False: another host holds the lease

    def lines(self) -> list[str]:
        out = [f"{table}\t{n}" for table, n in sorted(self.rows.items())]
        out += [f"{table}\t?" for table in self.unknown]
        out.append(f"bytes\t{self.bytes}")
        return out


def thumbs_dir(settings: Settings, job_id: str) -> Path:
    return settings.uploads.data_dir / "thumbs" / job_id  # api.thumbnails writes there


def _tree_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).stat().st_size
    return total


def _cutoff(collector: retention.Collector, settings: Settings, now: datetime) -> datetime | None:
    keep = collector.keep_s(settings)
    return now - timedelta(seconds=keep) if keep else None


def plan(settings: Settings, sessions: sessionmaker[Session], *, now: datetime | None = None) -> Report:
    """What a pass at ``now`` would delete: the same rule, counted; nothing changes."""
    now = now or utcnow()
    report = Report()
    page = settings.retention.janitor_batch_rows
    with sessions() as s:
        rules = retention.policy(s, settings)
        after = ""
        while ids := retention.expired_job_ids(s, rules=rules, now=now, limit=page, after=after):
            after = ids[-1]
            for job_id in ids:
                rows, size = retention.job_rows(s, job_id=job_id)
                report.rows.update(rows)
                report.bytes += size + _tree_bytes(thumbs_dir(settings, job_id))
        n, size = retention.count_files(s, rules=rules, now=now)
        if n:
            report.rows["files"] += n
        report.bytes += size
        for collector in retention.COLLECTORS:
            cutoff = _cutoff(collector, settings, now)
            if cutoff is None:
                continue
            if collector.count_before is None:
                report.unknown.append(collector.table)
            elif n := collector.count_before(s, cutoff):
                report.rows[collector.table] += n
        s.rollback()
    return report


class _Pass:
    """One pass's bookkeeping: the transactions' times, and the lease renewed between them."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session], owner: str, report: Report) -> None:
        self.settings, self.sessions, self.owner, self.report = settings, sessions, owner, report
        self.renewed = time.monotonic()

    def timed(self, started: float) -> None:
        took = time.monotonic() - started
        self.report.transactions += 1
        self.report.longest_transaction_s = max(self.report.longest_transaction_s, took)
        if time.monotonic() - self.renewed > LEASE_TTL.total_seconds() / 3:
            with self.sessions() as s:
                if not retention.take_lease(s, owner=self.owner, now=utcnow(), ttl=LEASE_TTL):
                    raise LostLease("another host took the janitor's lease")
            self.renewed = time.monotonic()


class LostLease(VlbatchError):
    """Another host took the lease (this one stalled past ``LEASE_TTL``): this pass stops."""

    code = JANITOR_BUSY


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def sweep(
    settings: Settings, sessions: sessionmaker[Session], *, now: datetime | None = None, owner: str | None = None
) -> Report:
    """One pass: delete what expired at ``now``. ``ran`` is False when another host holds the lease."""
    now = now or utcnow()
    owner = owner or default_owner()
    report = Report()
    with sessions() as s:
        if not retention.take_lease(s, owner=owner, now=utcnow(), ttl=LEASE_TTL):
            report.ran = False
            return report
    run = _Pass(settings, sessions, owner, report)
    try:
        _jobs(run, now)
        _files(run, now)
        _collectors(run, now)
    except LostLease:
        log.warning("janitor: another host took the lease; this pass stops")
    finally:
        with sessions() as s:
            retention.release_lease(s, owner=owner)
    if report.rows:
        log.info("janitor deleted %s, %d bytes", dict(report.rows), report.bytes)
    return report


def _jobs(run: _Pass, now: datetime) -> None:
    limit = run.settings.retention.janitor_batch_rows
    after = ""
    while True:
        with run.sessions() as s:
            rules = retention.policy(s, run.settings)
            ids = retention.expired_job_ids(s, rules=rules, now=now, limit=limit, after=after)
            s.rollback()
        if not ids:
            return
        after = ids[-1]
        for job_id in ids:
            while True:
                started = time.monotonic()
                with run.sessions() as s:
                    page = retention.delete_job_page(s, job_id=job_id, rules=rules, now=now, limit=limit)
                    s.commit()
                run.timed(started)
                run.report.rows.update(page.rows)
                run.report.bytes += page.bytes
                if page.skipped or page.done:
                    break
            if page.done:
                thumbs = thumbs_dir(run.settings, job_id)
                run.report.bytes += _tree_bytes(thumbs)
                shutil.rmtree(thumbs, ignore_errors=True)


def _files(run: _Pass, now: datetime) -> None:
    fs = store(run.settings)
    while True:
        started = time.monotonic()
        with run.sessions() as s:
            rules = retention.policy(s, run.settings)
            ids = retention.expired_files(s, rules=rules, now=now, limit=run.settings.retention.janitor_batch_rows)
            gone = retention.delete_files(s, ids=ids, rules=rules, now=now) if ids else []
            s.commit()
        run.timed(started)
        for stored_as, size in gone:  # the rows are gone first: no row ever names bytes that are not there
            fs.delete(stored_as)
            run.report.rows["files"] += 1
            run.report.bytes += size
        if len(ids) < run.settings.retention.janitor_batch_rows:
            return


def _collectors(run: _Pass, now: datetime) -> None:
    limit = run.settings.retention.janitor_batch_rows
    for collector in retention.COLLECTORS:
        cutoff = _cutoff(collector, run.settings, now)
        if cutoff is None:
            continue
        while True:
            started = time.monotonic()
            with run.sessions() as s:
                n = collector.delete_before(s, cutoff, limit)
                s.commit()
            run.timed(started)
            if n:
                run.report.rows[collector.table] += n
            if n < limit:
                break


def janitor_forever(settings: Settings, sessions: sessionmaker[Session], stop: threading.Event) -> None:
    """A pass every VLBATCH_JANITOR_INTERVAL_S until ``stop`` is set (the API runs it; one host at a time)."""
    owner = default_owner()
    while not stop.wait(settings.retention.janitor_interval_s):
        try:
            sweep(settings, sessions, owner=owner)
        except Exception:  # a database outage: the next pass tries again
            log.exception("janitor pass failed")
