"""The webhook sender against a real receiver on loopback, on SQLite and PostgreSQL: every delivery verifies with the
``standardwebhooks`` library; a job run by the feeder (stub engine) sends ``job.completed`` once, when all its
results are in; a receiver answering 500 three times then 200 gets the event with the four attempts listed; a
receiver that hangs does not hold the worker back; refused addresses are refused at creation, at delivery (the name
may resolve elsewhere by then), and a redirect to one is never followed."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from engine.runtime.config import EngineConfig
from jobs import webhook_endpoints as service
from jobs.refusals import JobRefused
from jobs.webhooks import backoff, finalize_batches, send_due, send_forever, signature
from pipelines import image_tagging
from tests.support.scripted import scripted_context, scripted_runner
from tests.support.webhook_receiver import Receiver
from vlbatch.db import job_store
from vlbatch.db.models import Result
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.db.webhook_tables import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from vlbatch.settings import Settings
from worker.feeder import Feeder

pytestmark = pytest.mark.timeout(120)

FAST = {"webhook_allow_loopback": True, "webhook_retry_base_s": 0.01, "webhook_timeout_s": 3, "webhook_poll_s": 0.05}


def _sessions(db_url: str) -> sessionmaker[Session]:
    migrate(db_url)
    return make_sessionmaker(make_engine(db_url))


def _endpoint(sessions: sessionmaker[Session], settings: Settings, url: str, events: list[str]) -> WebhookEndpoint:
    with sessions() as s:
        return service.create(s, settings, tenant="default", url=url, events=events, description=None)


def _deliveries(sessions: sessionmaker[Session], endpoint_id: str) -> list[service.DeliveryView]:
    with sessions() as s:
        row = service.found(s, scope=None, endpoint_id=endpoint_id)
        return service.deliveries(s, row=row, limit=100, status=None)


def _send_until_settled(settings: Settings, sessions: sessionmaker[Session], passes: int = 400) -> None:
    """Passes of the sender until nothing is pending (each pass waits out the tiny back-off first)."""
    for _ in range(passes):
        send_due(settings, sessions)
        with sessions() as s:
            pending = s.scalar(
                select(func.count()).select_from(WebhookDelivery).where(WebhookDelivery.status == "pending")
            )
        if not pending:
            return
        time.sleep(0.02)
    raise AssertionError("deliveries still pending")


def test_the_signature_is_the_standard_webhooks_one() -> None:
    from standardwebhooks import Webhook

    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"type":"ping"}'
    ts = int(time.time())
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(ts),
        "webhook-signature": signature(secret, "msg_1", ts, body),
    }
    assert Webhook(secret).verify(body, headers) == {"type": "ping"}
    tampered = dict(headers, **{"webhook-id": "msg_2"})
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(secret).verify(body, tampered)


def test_back_off_doubles_with_jitter_and_stops_growing_at_an_hour() -> None:
    settings = Settings(webhook_retry_base_s=30)
    rng = random.Random(7)
    for attempts, full in ((1, 30), (2, 60), (3, 120), (12, 3600), (40, 3600)):
        waits = [backoff(settings, attempts, rng) for _ in range(50)]
        assert all(full * 0.5 <= w <= full for w in waits), (attempts, min(waits), max(waits))
        assert len(set(waits)) > 1  # jittered, so senders do not retry in step


def test_a_ping_is_delivered_signed_and_verified(db_url: str) -> None:
    sessions = _sessions(db_url)
    settings = Settings(database_url=db_url, **FAST)  # type: ignore[arg-type]
    with Receiver() as rx:
        endpoint = _endpoint(sessions, settings, rx.url, ["ping"])
        with sessions() as s:
            delivery = service.ping(s, settings, row=service.found(s, scope=None, endpoint_id=endpoint.id))
        _send_until_settled(settings, sessions)
        [payload] = rx.verified(endpoint.secret)
    assert payload["type"] == "ping" and payload["data"] == {"object": "webhook_endpoint", "id": endpoint.id}
    assert rx.received[0].headers["webhook-id"] == delivery.id
    [view] = _deliveries(sessions, endpoint.id)
    assert view.delivery.status == "delivered" and [a.status_code for a in view.attempts] == [200]


def test_a_receiver_failing_three_times_gets_the_event_with_every_attempt_listed(db_url: str) -> None:
    sessions = _sessions(db_url)
    settings = Settings(database_url=db_url, webhook_max_answer_bytes=1024, **FAST)  # type: ignore[arg-type]
    with Receiver(statuses=[500, 500, 500, 200]) as rx:
        endpoint = _endpoint(sessions, settings, rx.url, ["ping"])
        with sessions() as s:
            service.ping(s, settings, row=service.found(s, scope=None, endpoint_id=endpoint.id))
        _send_until_settled(settings, sessions)
        payloads = rx.verified(endpoint.secret)
    assert len(payloads) == 4 and len({r.headers["webhook-id"] for r in rx.received}) == 1  # one message, retried
    [view] = _deliveries(sessions, endpoint.id)
    assert view.delivery.status == "delivered" and view.delivery.attempts == 4
    assert [a.status_code for a in view.attempts] == [500, 500, 500, 200]
    assert [a.error_code for a in view.attempts] == ["webhook_http_error"] * 3 + [None]
    assert all(a.latency_ms >= 0 for a in view.attempts)
    with sessions() as s:  # the 100 kB error pages were read no further than the setting
        answers = list(s.scalars(select(WebhookAttempt.answer).where(WebhookAttempt.status_code == 500)))
    assert answers and all(a is not None and len(a) <= 1024 for a in answers)
    with sessions() as s:
        assert s.get(WebhookEndpoint, endpoint.id).failing_since is None  # type: ignore[union-attr]  # a success


def test_a_delivery_failing_past_its_window_fails_and_a_day_of_failures_disables_the_endpoint(db_url: str) -> None:
    sessions = _sessions(db_url)
    window = Settings(database_url=db_url, webhook_retry_for_s=0.2, **FAST)  # type: ignore[arg-type]
    # the failures of the first delivery ran for its whole window (0.2 s), longer than this allows
    strict = Settings(database_url=db_url, webhook_disable_after_s=0.1, **FAST)  # type: ignore[arg-type]
    with Receiver(statuses=[503]) as rx:
        endpoint = _endpoint(sessions, window, rx.url, ["ping"])
        with sessions() as s:
            first = service.ping(s, window, row=service.found(s, scope=None, endpoint_id=endpoint.id))
        _send_until_settled(window, sessions)  # retried until its window closed
        with sessions() as s:
            view = service.delivery(s, row=service.found(s, scope=None, endpoint_id=endpoint.id), delivery_id=first.id)
            assert view.delivery.status == "failed" and view.delivery.last_error == "webhook_http_error"
            assert len(view.attempts) >= 2 and all(a.status_code == 503 for a in view.attempts)
            assert s.get(WebhookEndpoint, endpoint.id).enabled  # type: ignore[union-attr]  # not failing long enough
            second = service.ping(s, strict, row=service.found(s, scope=None, endpoint_id=endpoint.id))
            third = service.ping(s, strict, row=service.found(s, scope=None, endpoint_id=endpoint.id))
        _send_until_settled(strict, sessions)
    with sessions() as s:
        row = s.get(WebhookEndpoint, endpoint.id)
        assert row is not None and not row.enabled
        assert "every delivery attempt failed since" in (row.disabled_reason or "")
        ended = {d: service.delivery(s, row=row, delivery_id=d).delivery for d in (second.id, third.id)}
        assert {d.status for d in ended.values()} == {"failed"}  # a disabled endpoint's deliveries end
        assert "webhook_endpoint_disabled" in {d.last_error for d in ended.values()}
        with pytest.raises(JobRefused) as refused:
            service.ping(s, strict, row=row)
        assert refused.value.code == "webhook_endpoint_disabled"


def _album(root: Path, n: int) -> list[str]:
    root.mkdir()
    for i in range(n):
        Image.new("RGB", (32, 32), (20 + i, 90, 160)).save(root / f"{i}.png")
    return [str(root / f"{i}.png") for i in range(n)]


def _job(sessions: sessionmaker[Session], paths: list[str]) -> tuple[str, list[int]]:
    with sessions() as s:
        job = job_store.create_job(
            s,
            pipeline=image_tagging.NAME,
            model="m",
            options=image_tagging.TaggingOptions(max_tags=3).model_dump(),
            items=job_store.items_from_paths(paths, images_per_prompt=1),
            chunk_size=2,
        )
        s.commit()
        return job.id, job_store.chunks_of(s, job_id=job.id)


def _run(sessions: sessionmaker[Session], album: Path, chunk_ids: list[int], **settings: object) -> None:
    runner = scripted_runner([], [], EngineConfig(model="scripted"))
    runner.load()
    feeder = Feeder(scripted_context(sessions, runner, album, **settings))
    try:
        for cid in chunk_ids:
            feeder.add_chunk(cid)
        assert feeder.wait_idle(60)
    finally:
        feeder.close()
        runner.close()


def test_a_job_run_by_the_feeder_sends_job_completed_once_with_all_its_results_in(db_url: str, tmp_path: Path) -> None:
    sessions = _sessions(db_url)
    settings = Settings(database_url=db_url, **FAST)  # type: ignore[arg-type]
    album = tmp_path / "album"
    job_id, chunks = _job(sessions, _album(album, 5))

    def results_at_receipt(_: object) -> int:  # what a receiver reading the results on the event would find
        with sessions() as s:
            return int(s.scalar(select(func.count()).select_from(Result).where(Result.job_id == job_id)) or 0)

    with Receiver(on_receive=results_at_receipt) as rx:
        endpoint = _endpoint(sessions, settings, rx.url, ["job.completed", "job.failed"])
        _run(sessions, album, chunks)
        _send_until_settled(settings, sessions)
        _run(sessions, album, chunks)  # a chunk delivered again after the end sends nothing more
        _send_until_settled(settings, sessions)
        [payload] = rx.verified(endpoint.secret)
    assert rx.received[0].seen == 5
    assert payload["type"] == "job.completed"
    data = payload["data"]
    assert data["id"] == job_id and data["status"] == "finished" and data["total"] == 5
    assert data["counts"] == {"succeeded": 5, "failed": 0, "cancelled": 0, "expired": 0}
    assert data["links"]["results"] == f"/v1/jobs/{job_id}/results" and "output" not in str(data)  # no results


def test_a_hanging_receiver_does_not_delay_the_worker(db_url: str, tmp_path: Path) -> None:
    sessions = _sessions(db_url)
    settings = Settings(database_url=db_url, **dict(FAST, webhook_timeout_s=30))  # type: ignore[arg-type]
    album = tmp_path / "album"
    first, first_chunks = _job(sessions, _album(album, 3))
    second, second_chunks = _job(sessions, [str(album / "0.png"), str(album / "1.png")])
    stop = threading.Event()
    with Receiver(hang=threading.Event()) as rx:
        endpoint = _endpoint(sessions, settings, rx.url, ["job.completed"])
        sender = threading.Thread(target=send_forever, args=(settings, sessions, stop), daemon=True)
        sender.start()
        try:
            _run(sessions, album, first_chunks)
            rx.wait_for(1)  # the sender is now held by the receiver for up to 30 s ...
            _run(sessions, album, second_chunks)  # ... and the worker runs the next job meanwhile
            with sessions() as s:
                assert job_store.item_counts(s, job_id=second)["succeeded"] == 2
                owed = {d.subject_id: d.status for d in s.scalars(select(WebhookDelivery))}
            assert owed == {first: "pending", second: "pending"}  # written with each job's end, not yet sent
        finally:
            stop.set()
            assert rx.hang is not None
            rx.hang.set()
            sender.join(40)
        [held] = rx.verified(endpoint.secret)
    assert held["data"]["id"] == first


REFUSED = [
    "http://127.0.0.1/hook",
    "http://localhost/hook",
    "http://2130706433/hook",
    "http://0x7f.1/hook",
    "http://127.1/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[::ffff:7f00:1]/hook",
    "http://10.1.2.3/hook",
    "http://192.168.0.10/hook",
    "http://169.254.169.254/latest/meta-data",
    "http://100.64.0.1/hook",
    "http://0.0.0.0/hook",
    "http://[fe80::1]/hook",
    "http://[64:ff9b::7f00:1]/hook",
    "http://[2002:7f00:1::]/hook",
]


@pytest.mark.parametrize("url", REFUSED)
def test_every_spelling_of_a_refused_address_is_refused_at_creation(url: str, tmp_path: Path) -> None:
    sessions = _sessions(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with sessions() as s, pytest.raises(JobRefused) as refused:
        service.create(s, Settings(), tenant="default", url=url, events=["ping"], description=None)
    assert refused.value.code == "webhook_url_refused", refused.value.message
    assert "VLBATCH_WEBHOOK_ALLOW_LOOPBACK" in refused.value.message


def test_an_octal_address_is_refused_as_no_url_at_all(tmp_path: Path) -> None:
    # httpx itself will not parse 0177.0.0.1 (127.0.0.1 in octal), so no request could ever go there.
    sessions = _sessions(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with sessions() as s, pytest.raises(JobRefused) as refused:
        service.create(s, Settings(), tenant="default", url="http://0177.0.0.1/hook", events=["ping"], description=None)
    assert refused.value.code == "invalid_webhook", refused.value.message


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://169.254.169.254/", "webhook_url_refused"),  # link-local (cloud metadata) stays refused
        ("http://0.0.0.0/", "webhook_url_refused"),
        ("http://[ff02::1]/", "webhook_url_refused"),
        ("ftp://127.0.0.1/hook", "invalid_webhook"),
        ("http://user:pw@127.0.0.1/hook", "invalid_webhook"),
        ("not a url", "invalid_webhook"),
    ],
)
def test_the_opt_in_opens_loopback_and_private_receivers_only(url: str, code: str, tmp_path: Path) -> None:
    sessions = _sessions(f"sqlite:///{tmp_path / 'db.sqlite'}")
    settings = Settings(webhook_allow_loopback=True)
    with sessions() as s:
        for ok in ("http://127.0.0.1:9/hook", "http://[::1]:9/hook", "http://10.0.0.5/hook", "http://localhost:9/"):
            service.create(s, settings, tenant="default", url=ok, events=["ping"], description=None)
        with pytest.raises(JobRefused) as refused:
            service.create(s, settings, tenant="default", url=url, events=["ping"], description=None)
    assert refused.value.code == code, refused.value.message


def test_a_url_refused_by_the_time_of_delivery_is_not_sent_to(db_url: str) -> None:
    sessions = _sessions(db_url)
    allowed = Settings(database_url=db_url, **FAST)  # type: ignore[arg-type]
    now_refused = Settings(database_url=db_url, **dict(FAST, webhook_allow_loopback=False))  # type: ignore[arg-type]
    with Receiver() as rx:
        endpoint = _endpoint(sessions, allowed, rx.url, ["ping"])
        with sessions() as s:
            service.ping(s, allowed, row=service.found(s, scope=None, endpoint_id=endpoint.id))
        send_due(now_refused, sessions)  # as if the name resolved to a refused address by now
        assert rx.received == []
    [view] = _deliveries(sessions, endpoint.id)
    assert view.delivery.status == "pending"  # tried again later, with back-off
    [attempt] = view.attempts
    assert attempt.error_code == "webhook_url_refused" and attempt.status_code is None


def test_a_redirect_is_never_followed(db_url: str) -> None:
    sessions = _sessions(db_url)
    settings = Settings(database_url=db_url, **FAST)  # type: ignore[arg-type]
    with Receiver() as target, Receiver(redirect_to="http://169.254.169.254/latest/meta-data") as metadata_hop:
        hop = Receiver(redirect_to=target.url)
        with hop:
            for rx in (metadata_hop, hop):
                endpoint = _endpoint(sessions, settings, rx.url, ["ping"])
                with sessions() as s:
                    service.ping(s, settings, row=service.found(s, scope=None, endpoint_id=endpoint.id))
            send_due(settings, sessions)
        assert target.received == [] and len(hop.received) == 1 and len(metadata_hop.received) == 1
    with sessions() as s:
        attempts = list(s.scalars(select(WebhookAttempt)))
    assert len(attempts) == 2 and {a.error_code for a in attempts} == {"webhook_redirect_refused"}
    assert {a.status_code for a in attempts} == {302}
    assert any("169.254.169.254" in (a.error_message or "") for a in attempts)


def test_a_batch_whose_job_ended_is_finalized_by_the_sender_and_its_event_delivered(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import update

    from jobs import batches as batch_jobs
    from jobs import publisher
    from vlbatch.db import batches
    from vlbatch.db.models import Batch, Item, Job

    monkeypatch.setattr(publisher, "publish_chunks", lambda *a, **kw: True)
    sessions = _sessions(db_url)
    settings = Settings(database_url=db_url, data_dir=tmp_path, **FAST)  # type: ignore[arg-type]
    line = {
        "custom_id": "a",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    }
    with Receiver() as rx:
        with sessions() as s:
            service.create(s, settings, tenant="acme", url=rx.url, events=["batch.completed"], description=None)
            writer = batch_jobs.store(settings).writer()
            writer.add(json.dumps(line).encode() + b"\n")
            name, size = writer.keep()
            file_id = batches.create_file(
                s, tenant="acme", filename="in.jsonl", purpose="batch", size=size, stored_as=name
            ).id
            s.commit()
            batch = batch_jobs.create(
                s,
                settings,
                tenant="acme",
                scope="acme",
                new=batch_jobs.NewBatch(input_file_id=file_id, endpoint="/v1/chat/completions"),
            )
            # its only line failed and the job ended, as a worker would leave it; nobody reads the batch
            s.execute(update(Item).where(Item.job_id == batch.job_id).values(status="failed", error_code="x"))
            s.execute(update(Job).where(Job.id == batch.job_id).values(status="finished"))
            s.commit()
            batch_id = batch.id
        assert send_due(settings, sessions) == 0  # nothing is owed until the batch ends
        assert finalize_batches(settings, sessions) == 1
        _send_until_settled(settings, sessions)
        [payload] = rx.verified(next(iter(r.secret for r in _endpoints(sessions))))
    with sessions() as s:
        assert s.get(Batch, batch_id).status == "completed"  # type: ignore[union-attr]
    assert payload["type"] == "batch.completed" and payload["data"]["id"] == batch_id
    assert payload["data"]["request_counts"] == {"total": 1, "completed": 0, "failed": 1}
    assert payload["data"]["links"]["errors"].startswith("/v1/files/file-")


def _endpoints(sessions: sessionmaker[Session]) -> list[WebhookEndpoint]:
    with sessions() as s:
        return list(s.scalars(select(WebhookEndpoint)))
