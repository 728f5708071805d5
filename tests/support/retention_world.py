"""A database holding expired and live jobs, files, batches and engine samples, for the janitor's tests: which rows
each part holds is known, so a test can assert exactly what a pass deletes and what it keeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from tests.support.db import outcome, record
from vlbatch.db import job_store, leases, retention
from vlbatch.db.models import (
    Batch,
    BatchStatus,
    DeviceSample,
    DocumentPart,
    EngineSample,
    Job,
    StoredFile,
    TagEdit,
    utcnow,
)
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

DAY = 86400
LONG_AGO = timedelta(days=10)


@dataclass
class World:
    sessions: sessionmaker[Session]
    settings: Settings
    expired_jobs: list[str] = field(default_factory=list)
    kept_jobs: list[str] = field(default_factory=list)
    live_job: str = ""  # running: a writer may still write results to it
    live_items: list[int] = field(default_factory=list)  # its claimed items, not yet written
    expired_files: list[str] = field(default_factory=list)
    kept_files: list[str] = field(default_factory=list)
    expired_file_bytes: int = 0


def _job(s: Session, *, n: int, tenant: str = "t1") -> str:
    job = job_store.create_job(
        s,
        pipeline="image_tagging",
        model="m",
        options={"a": 1},
        items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(n)],
        chunk_size=4,
        tenant=tenant,
    )
    s.commit()
    return job.id


def _run(s: Session, job_id: str, *, finish: bool = True) -> list[int]:
    """Claim every chunk and write a result for each item (``finish``), or leave them claimed; returns item ids."""
    ids: list[int] = []
    for cid in job_store.chunks_of(s, job_id=job_id):
        items = leases.claim_chunk(s, chunk_id=cid, owner="w", lease=timedelta(hours=1))
        ids += [i.id for i in items]
        if finish:
            for it in items:
                assert record(s, outcome(it.id, job_id))
            leases.finish_chunk(s, chunk_id=cid, owner="w")
        s.commit()
    return ids


def _age(s: Session, job_id: str, by: timedelta) -> None:
    then = utcnow() - by
    s.execute(update(Job).where(Job.id == job_id).values(created_at=then, finished_at=then))
    s.commit()


def _file(s: Session, settings: Settings, *, tenant: str, name: str, size: int, age: timedelta) -> StoredFile:
    root = settings.uploads.data_dir / "files"
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(b"x" * size)
    row = StoredFile(
        id=f"file-{name}",
        tenant=tenant,
        filename=f"{name}.jsonl",
        purpose="batch",
        bytes=size,
        stored_as=name,
        created_at=utcnow() - age,
    )
    s.add(row)
    s.commit()
    return row


def build(db_url: str, data_dir: Path, *, batch_rows: int = 3) -> World:
    """Tenant t1 keeps jobs and files a day (the settings); tenant t2 keeps them for ever (its own row)."""
    migrate(db_url)
    settings = Settings(
        database_url=db_url,
        data_dir=data_dir,
        retention_jobs_s=DAY,
        retention_files_s=DAY,
        retention_engine_samples_s=DAY,
        janitor_batch_rows=batch_rows,
    )
    world = World(make_sessionmaker(make_engine(db_url)), settings)
    with world.sessions() as s:
        retention.set_retention(s, tenant="t2", jobs_s=0, files_s=0)
        # Expired: a finished job of t1 ended 10 days ago, with a document part, a tag edit, telemetry, a batch
        # and a cached thumbnail; a cancelled one; and a t2 job whose own expires_at passed.
        old = _job(s, n=7)
        items = _run(s, old)
        s.add(DocumentPart(item_id=items[0], stage="ocr", idx=0, pages=[1], output={"t": "x"}))
        s.add(TagEdit(item_id=items[1], tag="kept", added=True, author="op"))
        s.add(DeviceSample(job_id=old, worker="w", device_id=0))
        s.add(
            Batch(
                id="batch_old",
                tenant="t1",
                endpoint="/v1/chat/completions",
                input_file_id="file-x",
                status=BatchStatus.COMPLETED,
                job_id=old,
            )
        )
        s.commit()
        _age(s, old, LONG_AGO)
        thumbs = data_dir / "thumbs" / old
        thumbs.mkdir(parents=True)
        (thumbs / f"{items[0]}.jpg").write_bytes(b"j" * 100)
        cancelled = _job(s, n=5)
        job_store.cancel_job(s, job_id=cancelled)
        s.commit()
        _age(s, cancelled, LONG_AGO)
        own = _job(s, n=2, tenant="t2")
        _run(s, own)
        s.execute(update(Job).where(Job.id == own).values(expires_at=utcnow() - timedelta(minutes=1)))
        s.commit()
        world.expired_jobs += [old, cancelled, own]

        # Kept: finished an hour ago; t2's old job (kept for ever); old but queued; old but its batch is still in
        # progress; and the live job, running since long ago, some of its items written.
        recent = _job(s, n=3)
        _run(s, recent)
        forever = _job(s, n=2, tenant="t2")
        _run(s, forever)
        _age(s, forever, LONG_AGO)
        queued = _job(s, n=3)
        _age(s, queued, LONG_AGO)
        s.execute(update(Job).where(Job.id == queued).values(finished_at=None))
        open_batch = _job(s, n=2)
        _run(s, open_batch)
        _age(s, open_batch, LONG_AGO)
        s.add(
            Batch(
                id="batch_open",
                tenant="t1",
                endpoint="/v1/chat/completions",
                input_file_id="file-x",
                status=BatchStatus.FINALIZING,
                job_id=open_batch,
            )
        )
        s.commit()
        live = _job(s, n=12)
        world.live_items = _run(s, live, finish=False)
        s.execute(update(Job).where(Job.id == live).values(created_at=utcnow() - LONG_AGO))
        s.commit()
        world.kept_jobs += [recent, forever, queued, open_batch]
        world.live_job = live

        # Files: t1's two-day-old upload (the default), one whose own expires_at passed (t2); kept: a fresh one,
        # and t2's old one.
        aged = _file(s, settings, tenant="t1", name="aged", size=300, age=timedelta(days=2))
        mine = _file(s, settings, tenant="t2", name="own", size=200, age=timedelta(hours=1))
        mine.expires_at = utcnow() - timedelta(seconds=1)
        s.commit()
        world.expired_files += [aged.id, mine.id]
        world.expired_file_bytes = 500
        fresh = _file(s, settings, tenant="t1", name="fresh", size=50, age=timedelta(hours=1))
        t2_old = _file(s, settings, tenant="t2", name="t2old", size=70, age=timedelta(days=40))
        world.kept_files += [fresh.id, t2_old.id]

        # Engine samples: 5 older than a day, 2 recent.
        for age in (LONG_AGO,) * 5 + (timedelta(minutes=5),) * 2:
            s.add(EngineSample(worker="w", model="m", sampled_at=utcnow() - age))
        s.commit()
    return world
