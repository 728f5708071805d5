"""GET /metrics over real HTTP: newest sample per worker and chip, stale workers dropped, valid text format."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from api.main import create_app
from api.prometheus import exposition
from engine.telemetry import DeviceReading
from vlbatch.db import job_store, queues
from vlbatch.db.models import EngineSample
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings
from worker.thermal import record_samples


def test_metrics_show_the_newest_reading_per_worker_and_chip(db_url: str, serve: type, api_key: type) -> None:
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    now = datetime.now(UTC)
    with factory() as s:
        job = job_store.create_job(
            s, pipeline="image_tagging", model="m", options={}, items=[job_store.NewItem(inputs={})], chunk_size=1
        )
        old = [DeviceReading(0, 64, 50.0, 40.0, 1000, 44280)]
        new = [DeviceReading(0, 64, 81.0, 45.2, 30000, 44280), DeviceReading(1, 64, 79.0, None, 29000, 43693)]
        record_samples(s, jobs={job.id: None}, worker="host:1", readings=old, at=now - timedelta(seconds=20))
        record_samples(s, jobs={job.id: None}, worker="host:1", readings=new, at=now - timedelta(seconds=5))
        gone = [DeviceReading(3, 96, 99.0, 50.0, 1, 2)]
        record_samples(s, jobs={job.id: None}, worker="dead:2", readings=gone, at=now - timedelta(hours=1))
        for at, mean, done in ((now - timedelta(seconds=20), 30.0, 10), (now - timedelta(seconds=5), 61.5, 90)):
            s.add(
                EngineSample(
                    worker="host:1",
                    model="m",  # a model a worker serves: its queues are labelled by name
                    sampled_at=at,
                    steps=done * 3,
                    running_sum=done * 100,
                    capacity=64,
                    mean_running=mean,
                    backlog=12,
                    items_done=done,
                    output_tokens=done * 40,
                    prep_images=done,
                    prep_seconds=1.0,
                    db_items=done,
                    db_seconds=0.1,
                    claims=done // 30,
                    claim_seconds=0.25,
                )
            )
        s.commit()

        assert queues.pause_queue(s, model="m", priority="interactive", by="admin")
        s.commit()

    admin = api_key.header(api_key.make(db_url, admin=True))
    with serve(create_app(Settings(database_url=db_url))) as srv:
        resp = httpx.get(f"{srv.url}/metrics", timeout=30, headers=admin)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    body = resp.text
    got = _samples(body)
    dev0 = _labels(worker="host:1", device="0", npu="64")
    dev1 = _labels(worker="host:1", device="1", npu="64")
    assert got[("vlbatch_device_temperature_celsius", dev0)] == 81
    assert got[("vlbatch_device_temperature_celsius", dev1)] == 79
    assert got[("vlbatch_device_memory_used_bytes", dev0)] == 31457280000
    assert got[("vlbatch_device_power_watts", dev0)] == 45.2
    assert ("vlbatch_device_power_watts", dev1) not in got  # no power reading, no series
    assert "dead:2" not in body and 50 not in {v for (n, _), v in got.items() if n.startswith("vlbatch_device_t")}
    stamp = got[("vlbatch_device_sample_timestamp_seconds", dev0)]
    assert abs(stamp - (now - timedelta(seconds=5)).timestamp()) < 0.01
    worker = _labels(worker="host:1")
    assert got[("vlbatch_engine_running_requests", worker)] == 61.5  # the newest sample only
    assert got[("vlbatch_engine_max_num_seqs", worker)] == 64
    assert got[("vlbatch_engine_items_done_total", worker)] == 90
    assert got[("vlbatch_preprocess_seconds_total", worker)] == 1.0
    assert got[("vlbatch_db_write_seconds_total", worker)] == 0.1
    assert (got[("vlbatch_db_claims_total", worker)], got[("vlbatch_db_claim_seconds_total", worker)]) == (3, 0.25)
    assert "# TYPE vlbatch_engine_items_done_total counter" in body
    queue = _labels(queue="vlbatch.m.batch")
    assert (
        got[("vlbatch_items", _labels(queue="vlbatch.m.batch", state="queued"))] == 1
    )  # the ledger: one queued item of job m
    assert got[("vlbatch_queue_depth_items", queue)] == 1
    assert got[("vlbatch_queue_paused", _labels(queue="vlbatch.m.interactive"))] == 1
    assert ("vlbatch_queue_paused", queue) not in got  # a running queue has no series


def _labels(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


def _samples(body: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the exposition, parsed by prometheus-client's own parser (so the format is valid)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def test_label_values_are_escaped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    migrate(url)
    factory = make_sessionmaker(make_engine(url))
    with factory() as s:
        job = job_store.create_job(
            s, pipeline="t", model="m", options={}, items=[job_store.NewItem(inputs={})], chunk_size=1
        )
        reading = [DeviceReading(0, 1, 40.0, None, None, None)]
        record_samples(s, jobs={job.id: None}, worker='a"b\\c\nd', readings=reading, at=datetime.now(UTC))
        s.commit()
        text = exposition(s).decode()
    assert 'worker="a\\"b\\\\c\\nd"' in text
    labels = _labels(worker='a"b\\c\nd', device="0", npu="1")
    assert _samples(text)[("vlbatch_device_temperature_celsius", labels)] == 40  # and parses back to the value


def test_the_grafana_dashboard_queries_only_series_the_api_exposes() -> None:
    import json
    import re

    from api.prometheus import DEVICE_GAUGES, ENGINE_COUNTERS, ENGINE_GAUGES

    exposed = {name for name, _, _ in (*DEVICE_GAUGES, *ENGINE_GAUGES)} | {f"{n}_total" for n, _, _ in ENGINE_COUNTERS}
    exposed |= {"vlbatch_items", "vlbatch_queue_depth_items"}
    dashboard = json.loads((Path(__file__).parents[2] / "deploy" / "grafana-dashboard.json").read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bvlbatch_[a-z_]+", target["expr"])
    }
    assert queried and queried <= exposed, queried - exposed
