"""GET /metrics over real HTTP: newest sample per worker and chip, stale workers dropped, valid text format."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx

from api.main import create_app
from api.routes.metrics import render
from engine.telemetry import DeviceReading
from vlbatch.db import crud
from vlbatch.db.models import DeviceSample, EngineSample
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings
from worker.thermal import record_samples

SAMPLE_LINE = re.compile(r'^[a-z_]+\{worker="[^"]*",device="\d+",npu="[^"]*"\} -?[0-9.e+]+$')
ENGINE_LINE = re.compile(r'^vlbatch_engine_[a-z_]+\{worker="[^"]*"\} -?[0-9.e+]+$')


def test_metrics_show_the_newest_reading_per_worker_and_chip(db_url: str, serve: type, api_key: type) -> None:
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    now = datetime.now(UTC)
    with factory() as s:
        job = crud.create_job(
            s, pipeline="image_tagging", model="m", options={}, items=[crud.NewItem(inputs={})], chunk_size=1
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
                )
            )
        s.commit()

    admin = api_key.header(api_key.make(db_url, admin=True))
    with serve(create_app(Settings(database_url=db_url))) as srv:
        resp = httpx.get(f"{srv.url}/metrics", timeout=30, headers=admin)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    body = resp.text
    assert 'vlbatch_device_temperature_celsius{worker="host:1",device="0",npu="64"} 81\n' in body
    assert 'vlbatch_device_temperature_celsius{worker="host:1",device="1",npu="64"} 79\n' in body
    assert 'vlbatch_device_memory_used_bytes{worker="host:1",device="0",npu="64"} 31457280000\n' in body
    assert 'vlbatch_device_power_watts{worker="host:1",device="0",npu="64"} 45.2\n' in body
    assert 'vlbatch_device_power_watts{worker="host:1",device="1"' not in body  # no power reading, no line
    assert "dead:2" not in body and " 50\n" not in body  # stale worker and superseded sample left out
    ts = re.search(r'vlbatch_device_sample_timestamp_seconds\{worker="host:1",device="0",npu="64"\} (\S+)', body)
    assert ts and abs(float(ts.group(1)) - (now - timedelta(seconds=5)).timestamp()) < 0.01
    assert 'vlbatch_engine_running_requests{worker="host:1"} 61.5\n' in body  # the newest sample only
    assert 'vlbatch_engine_max_num_seqs{worker="host:1"} 64\n' in body
    assert 'vlbatch_engine_items_done_total{worker="host:1"} 90\n' in body
    assert "# TYPE vlbatch_engine_items_done_total counter" in body
    for line in body.splitlines():
        assert line.startswith(("# HELP ", "# TYPE ")) or SAMPLE_LINE.match(line) or ENGINE_LINE.match(line), line


def test_label_values_are_escaped() -> None:
    sample = DeviceSample(worker='a"b\\c\nd', device_id=0, npu_id=1, temp_c=40.0, sampled_at=datetime.now(UTC))
    text = render([sample])
    assert 'worker="a\\"b\\\\c\\nd"' in text
    assert text.count("\n") == len(text.splitlines())
