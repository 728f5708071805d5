"""The janitor (``jobs.janitor`` over ``vlbatch.db.retention``): on SQLite and PostgreSQL it deletes exactly the
expired jobs, files and aged rows, a few rows per transaction, while the worker's result writer writes to a live
job; the dry run counts what the pass then deletes; one host at a time."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from pathlib import Path

from sqlalchemy import exists, func, select

from jobs import janitor
from tests.support.db import outcome, record
from tests.support.retention_world import build
from vlbatch.db import job_store, leases, retention, webhooks
from vlbatch.db.models import (
    Batch,
    Chunk,
    DeviceSample,
    DocumentPart,
    EngineSample,
    Item,
    Job,
    Result,
    StoredFile,
    TagEdit,
    utcnow,
)
from vlbatch.db.webhook_tables import WebhookDelivery

TABLES = {
    "jobs": Job,
    "items": Item,
    "results": Result,
    "chunks": Chunk,
    "document_parts": DocumentPart,
    "tag_edits": TagEdit,
    "device_telemetry": DeviceSample,
    "batches": Batch,
    "files": StoredFile,
    "engine_samples": EngineSample,
}
EXPECTED = Counter(
    jobs=3,
    items=14,
    results=9,
    chunks=5,
    document_parts=1,
    tag_edits=1,
    device_telemetry=1,
    batches=1,
    files=2,
    engine_samples=5,
)


def _counts(sessions: object) -> Counter[str]:
    with sessions() as s:  # type: ignore[operator]
        return Counter(
            {name: int(s.scalar(select(func.count()).select_from(model)) or 0) for name, model in TABLES.items()}
        )


def test_the_janitor_deletes_exactly_what_expired_while_a_live_job_is_written(db_url: str, tmp_path: Path) -> None:
    world = build(db_url, tmp_path / "data")
    before = _counts(world.sessions)
    now = utcnow()
    planned = janitor.plan(world.settings, world.sessions, now=now)
    assert planned.rows == EXPECTED
    assert _counts(world.sessions) == before  # the dry run deleted nothing

    # The worker's writer finishes the live job's items, one transaction each, while the pass runs.
    start = threading.Barrier(2)

    def write() -> None:
        start.wait()
        with world.sessions() as s:
            for item_id in world.live_items:
                assert record(s, outcome(item_id, world.live_job))
                s.commit()
            for cid in job_store.chunks_of(s, job_id=world.live_job):
                leases.finish_chunk(s, chunk_id=cid, owner="w")
            s.commit()

    writer = threading.Thread(target=write)
    writer.start()
    start.wait()
    done = janitor.sweep(world.settings, world.sessions, now=now)
    writer.join()

    assert done.ran
    assert done.rows == planned.rows and done.bytes == planned.bytes
    # files 500 bytes, one 100-byte thumbnail, and the 9 results' text: '{}' and '{"tags": ["x"]}'
    assert done.bytes == 500 + 100 + 9 * (2 + 15)
    # three items a transaction: 3 + 2 + 1 for the jobs, 1 for the files, 1 for the webhook deliveries (none),
    # 2 for the engine samples
    assert done.transactions == 10
    after = _counts(world.sessions)
    live_results = len(world.live_items)
    assert after == before - EXPECTED + Counter(results=live_results)
    with world.sessions() as s:
        assert set(s.scalars(select(Job.id))) == {*world.kept_jobs, world.live_job}
        assert set(s.scalars(select(StoredFile.id))) == set(world.kept_files)
        assert s.scalar(select(func.count()).where(Result.job_id == world.live_job)) == live_results
        assert s.get(Job, world.live_job).status == "finished"  # type: ignore[union-attr]
        assert set(s.scalars(select(Batch.id))) == {"batch_open"}
    files = world.settings.uploads.data_dir / "files"
    assert sorted(p.name for p in files.iterdir()) == ["fresh", "t2old"]
    assert not (world.settings.uploads.data_dir / "thumbs" / world.expired_jobs[0]).exists()
    # Nothing is left to do: a second pass deletes nothing.
    assert janitor.sweep(world.settings, world.sessions, now=now).rows == Counter()


def test_a_registered_hold_keeps_an_expired_job_and_a_later_pass_takes_it(db_url: str, tmp_path: Path) -> None:
    """The webhook slot: a hold (here "the job has a tag edit", standing for "its webhook is pending") keeps an
    expired job; once it no longer holds, the next pass collects it."""
    world = build(db_url, tmp_path / "data")
    held = world.expired_jobs[0]
    holding = True

    def hold() -> object:
        edited = exists(select(TagEdit.id).join(Item, Item.id == TagEdit.item_id).where(Item.job_id == Job.id))
        return edited if holding else Job.id.is_(None)

    retention.register_job_hold(hold)  # type: ignore[arg-type]
    try:
        first = janitor.sweep(world.settings, world.sessions)
        assert first.rows["jobs"] == 2
        with world.sessions() as s:
            assert s.get(Job, held) is not None
            assert s.scalar(select(func.count()).where(Item.job_id == held)) == 7
        holding = False
        assert janitor.sweep(world.settings, world.sessions).rows["jobs"] == 1
    finally:
        retention._JOB_HOLDS.remove(hold)  # type: ignore[arg-type]


def test_one_janitor_at_a_time_and_a_dead_ones_lease_lapses(db_url: str, tmp_path: Path) -> None:
    world = build(db_url, tmp_path / "data")
    now = utcnow()
    with world.sessions() as s:
        assert retention.take_lease(s, owner="host-a", now=now, ttl=timedelta(minutes=10))
        assert not retention.take_lease(s, owner="host-b", now=now, ttl=timedelta(minutes=10))
    # host-a holds it: host-b's pass does nothing and deletes nothing
    skipped = janitor.sweep(world.settings, world.sessions, owner="host-b")
    assert not skipped.ran and skipped.rows == Counter()
    with world.sessions() as s:
        # host-a died: past its lease, host-b takes it over
        assert retention.take_lease(s, owner="host-b", now=now + timedelta(minutes=11), ttl=timedelta(minutes=10))
        retention.release_lease(s, owner="host-b")
    assert janitor.sweep(world.settings, world.sessions, owner="host-b").rows == EXPECTED


def test_expiry_is_shown_before_it_happens(db_url: str, tmp_path: Path) -> None:
    world = build(db_url, tmp_path / "data")
    with world.sessions() as s:
        rules = retention.policy(s, world.settings)
        recent = s.get(Job, world.kept_jobs[0])
        assert recent is not None and recent.finished_at is not None
        shown = retention.job_expires_at(recent, rules)
        assert shown is not None and shown > utcnow()
        assert retention.job_expires_at(s.get(Job, world.live_job), rules) is None  # type: ignore[arg-type]
        assert retention.job_expires_at(s.get(Job, world.kept_jobs[1]), rules) is None  # type: ignore[arg-type]
        fresh = s.get(StoredFile, world.kept_files[0])
        assert fresh is not None
        assert retention.file_expires_at(fresh, rules) is not None
        assert retention.file_expires_at(s.get(StoredFile, world.kept_files[1]), rules) is None  # type: ignore[arg-type]


def test_storage_metrics_per_tenant_fall_as_the_janitor_deletes(db_url: str, tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from api.prometheus import exposition

    world = build(db_url, tmp_path / "data")

    def gauges() -> dict[tuple[str, str], float]:
        with world.sessions() as s:
            text = exposition(s).decode()
        return {
            (sample.name, sample.labels["tenant"]): sample.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith("vlbatch_tenant_")
            for sample in family.samples
        }

    before = gauges()
    # t1: the old, cancelled, recent, queued, open-batch and live jobs; files of 300 and 50 bytes
    assert (
        before[("vlbatch_tenant_jobs", "t1")] == 6 and before[("vlbatch_tenant_items", "t1")] == 7 + 5 + 3 + 3 + 2 + 12
    )
    assert before[("vlbatch_tenant_files", "t1")] == 2 and before[("vlbatch_tenant_file_bytes", "t1")] == 350
    assert before[("vlbatch_tenant_jobs", "t2")] == 2 and before[("vlbatch_tenant_file_bytes", "t2")] == 270
    janitor.sweep(world.settings, world.sessions)
    after = gauges()
    assert after[("vlbatch_tenant_jobs", "t1")] == 4 and after[("vlbatch_tenant_items", "t1")] == 3 + 3 + 2 + 12
    assert after[("vlbatch_tenant_files", "t1")] == 1 and after[("vlbatch_tenant_file_bytes", "t1")] == 50
    assert after[("vlbatch_tenant_jobs", "t2")] == 1 and after[("vlbatch_tenant_file_bytes", "t2")] == 70


def test_a_registered_collector_is_swept_in_pages_and_the_dry_run_says_when_it_cannot_count(
    db_url: str, tmp_path: Path
) -> None:
    """The collector slot the webhook side fills: its delete is called with the cutoff its keep time gives, a page at
    a time until a page comes back short; without a count the dry run names it as unknown."""
    world = build(db_url, tmp_path / "data")
    calls: list[tuple[object, int]] = []
    left = [7]  # rows the fake table holds

    def delete_before(session: object, cutoff: object, limit: int) -> int:
        calls.append((cutoff, limit))
        n = min(left[0], limit)
        left[0] -= n
        return n

    slot = retention.Collector("webhook_deliveries", lambda s: 3600, delete_before)
    retention.register_collector(slot)
    try:
        now = utcnow()
        assert janitor.plan(world.settings, world.sessions, now=now).unknown == ["webhook_deliveries"]
        done = janitor.sweep(world.settings, world.sessions, now=now)
    finally:
        retention.COLLECTORS.remove(slot)
    assert done.rows["webhook_deliveries"] == 7
    assert calls == [(now - timedelta(seconds=3600), 3)] * 3  # 3 + 3 + 1


def test_a_pending_webhook_keeps_its_job_and_old_deliveries_are_collected(db_url: str, tmp_path: Path) -> None:
    """The job's ``job.completed`` still to be delivered: the expired job stays, results and all; once the delivery
    ended (here: failed for good), the next pass takes the job, and a week later the delivery row itself goes."""
    world = build(db_url, tmp_path / "data")
    held = world.expired_jobs[0]
    with world.sessions() as s:
        tenant = s.get(Job, held).tenant  # type: ignore[union-attr]
        endpoint = webhooks.create_endpoint(
            s, tenant=tenant, url="https://hooks.example/in", events=["job.completed"], description=None
        )
        (delivery,) = webhooks.enqueue(s, endpoints=[endpoint], event="job.completed", subject_id=held, payload={})
        delivery_id = delivery.id
        s.commit()
    first = janitor.sweep(world.settings, world.sessions)
    assert first.rows["jobs"] == EXPECTED["jobs"] - 1 and first.rows["webhook_deliveries"] == 0
    with world.sessions() as s:
        assert s.get(Job, held) is not None
        failed = s.get(WebhookDelivery, delivery_id)
        assert failed is not None
        webhooks.end_undeliverable(s, delivery=failed, code="webhook_endpoint_disabled", message="off")
        s.commit()
    assert janitor.sweep(world.settings, world.sessions).rows["jobs"] == 1
    week = world.settings.retention.retention_webhook_deliveries_s
    later = utcnow() + timedelta(seconds=week + 60)
    assert janitor.plan(world.settings, world.sessions, now=later).rows["webhook_deliveries"] == 1
    assert janitor.sweep(world.settings, world.sessions, now=later).rows["webhook_deliveries"] == 1
    with world.sessions() as s:
        assert s.get(WebhookDelivery, delivery_id) is None
