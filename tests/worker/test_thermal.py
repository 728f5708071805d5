"""Telemetry sampling, the thermal gate's hysteresis, samples stored with the job, and migration 0002."""

from __future__ import annotations

import stat
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import inspect, select
from sqlalchemy.orm import Session, sessionmaker

from engine import telemetry
from engine.telemetry import DeviceReading
from tests.support.db import queued_job
from vlbatch.db import job_store
from vlbatch.db.models import DeviceSample
from vlbatch.db.session import MIGRATIONS_DIR, make_engine, migrate
from vlbatch.settings import Settings
from worker import thermal

FIX = Path(__file__).parents[1] / "engine" / "fixtures" / "npu_smi"


def r(device: int, temp: float | None) -> DeviceReading:
    return DeviceReading(device_id=device, temp_c=temp)


def test_gate_closes_at_the_limit_and_opens_only_below_resume() -> None:
    gate = thermal.ThermalGate(limit_c=95, resume_c=88)
    assert gate.update([r(0, 94.9), r(1, 60)]) is True
    assert gate.update([r(0, 95), r(1, 60)]) is False
    assert gate.update([r(0, 90)]) is False  # cooling, but not below resume: still closed
    assert gate.update([r(0, None)]) is False  # no reading says nothing
    assert gate.update([r(1, 99)]) is False
    assert gate.update([r(0, 88)]) is False  # chip 1 is still hot
    assert gate.hot() == {1: 99}
    assert gate.update([r(1, 80)]) is True
    assert gate.update([]) is True


def test_no_readings_never_close_the_gate() -> None:
    gate = thermal.ThermalGate(limit_c=95, resume_c=88)
    for _ in range(3):
        assert gate.update(telemetry.NullSampler().sample()) is True


def test_gate_refuses_a_resume_above_the_limit() -> None:
    with pytest.raises(ValueError, match=r"resume_c=95.*limit_c=90"):
        thermal.ThermalGate(limit_c=90, resume_c=95)


def test_wait_open_wakes_when_chips_cool_and_times_out_when_they_do_not() -> None:
    gate = thermal.ThermalGate(limit_c=95, resume_c=88)
    gate.update([r(0, 97)])
    assert gate.wait_open(0.1) is False
    timer = threading.Timer(0.2, gate.update, args=([r(0, 70)],))
    timer.start()
    t0 = time.monotonic()
    assert gate.wait_open(10) is True
    assert time.monotonic() - t0 < 5
    timer.join()


def test_release_waiters_ends_a_thermal_wait_at_shutdown() -> None:
    gate = thermal.ThermalGate(limit_c=95, resume_c=88)
    gate.update([r(0, 97)])
    answers: list[bool] = []
    waiter = threading.Thread(target=lambda: answers.append(gate.wait_open(600)))
    waiter.start()
    time.sleep(0.1)
    t0 = time.monotonic()
    gate.release_waiters()
    waiter.join(5)
    assert not waiter.is_alive() and answers == [False]  # woken, and the chip is still hot
    assert time.monotonic() - t0 < 5
    assert gate.wait_open(600) is False  # later waits return at once too
    gate.update([r(0, 70)])
    assert gate.wait_open(600) is True


def fake_npu_smi(tmp_path: Path, info: str) -> str:
    path = tmp_path / "npu-smi"
    common = FIX / "npu-smi_info_-t_common_-i_1_310p_gpustack_fixture.txt"
    path.write_text(f'#!/bin/sh\nif [ "$2" = "-t" ]; then cat "{common}"; else cat "{FIX / info}"; fi\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_npu_smi_sampler_reads_owned_chips_with_card_power(tmp_path: Path) -> None:
    binary = fake_npu_smi(tmp_path, "variant_310p3_2cards_chip3_warning_chip0_97C.txt")
    readings = telemetry.NpuSmiSampler([0, 1], binary=binary).sample()
    assert readings == [
        DeviceReading(0, 64, 97.0, 45.2, 1526, 44280),
        DeviceReading(1, 64, 32.0, 45.2, 1429, 43693),
    ]
    assert len(telemetry.NpuSmiSampler(None, binary=binary).sample()) == 4


def test_sampler_on_a_broken_driver_returns_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    binary = fake_npu_smi(tmp_path, "error_npu-smi_in_container_dcmi_-8005.txt")
    sampler = telemetry.NpuSmiSampler(None, binary=binary)
    assert sampler.sample() == [] and sampler.sample() == []
    assert sum("ret -8005" in m for m in caplog.messages) == 1  # logged once per failure streak


def test_make_sampler_without_npu_smi_is_the_null_sampler(tmp_path: Path) -> None:
    assert isinstance(telemetry.make_sampler([0], binary=str(tmp_path / "absent")), telemetry.NullSampler)


class Scripted:
    def __init__(self, *rounds: list[DeviceReading]) -> None:
        self.rounds = list(rounds)

    def sample(self) -> list[DeviceReading]:
        return self.rounds.pop(0) if len(self.rounds) > 1 else self.rounds[0]


def _job(db_url: str) -> tuple[sessionmaker[Session], str, list[int]]:
    factory, job_id = queued_job(db_url, n=4, chunk=2)
    with factory() as s:
        return factory, job_id, job_store.chunks_of(s, job_id=job_id)


def test_samples_are_stored_with_the_running_job(db_url: str) -> None:
    factory, job_id, chunks = _job(db_url)
    settings = Settings(database_url=db_url)
    hot = [DeviceReading(0, 64, 97.0, 45.2, 30000, 44280), DeviceReading(1, 64, 60.0, 45.2, 1000, 43693)]
    mon = thermal.DeviceMonitor(settings, factory, Scripted(hot), worker="w1")
    mon.tick()  # no chunk running: nothing stored
    with mon.running(chunks[0]), mon.running(chunks[1]):
        mon.tick()
    mon.tick()
    with factory() as s:
        rows = list(s.scalars(select(DeviceSample).order_by(DeviceSample.device_id)))
    assert [(x.job_id, x.chunk_id, x.worker, x.device_id, x.temp_c, x.power_w) for x in rows] == [
        (job_id, chunks[0], "w1", 0, 97.0, 45.2),  # once per job, though two of its chunks ran
        (job_id, chunks[0], "w1", 1, 60.0, 45.2),
    ]
    assert rows[0].memory_used_mb == 30000 and rows[0].sampled_at is not None
    assert not mon.gate.is_open


def test_wait_until_cool_is_bounded_and_resumes_when_cool(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    factory, _, chunks = _job(db_url)
    settings = Settings(database_url=db_url, thermal_max_wait_s=0.2)
    mon = thermal.DeviceMonitor(settings, factory, Scripted([r(0, 96)], [r(0, 70)]), worker="w1")
    mon.tick()
    started = time.monotonic()
    with caplog.at_level("ERROR", logger="worker.thermal"):
        assert mon.wait_until_cool(chunks[0]) is False  # gave up: the chunk is left to the reconciler
    assert 0.2 <= time.monotonic() - started < 5
    assert f"chunk {chunks[0]} not claimed: chips {{0: 96" in caplog.text and "stayed above 88 C" in caplog.text
    slow = thermal.DeviceMonitor(settings.model_copy(update={"thermal_max_wait_s": 10}), factory, mon.sampler, "w1")
    slow.gate.update([r(0, 96)])
    threading.Timer(0.2, slow.tick).start()
    assert slow.wait_until_cool(chunks[0]) is True
    assert slow.gate.is_open


def test_a_chunk_refused_on_hot_chips_records_nothing(db_url: str) -> None:
    factory, _, chunks = _job(db_url)
    settings = Settings(database_url=db_url, thermal_max_wait_s=0.1)
    hot = thermal.DeviceMonitor(settings, factory, Scripted([r(0, 97)]), worker="w1")
    hot.tick()
    assert hot.wait_until_cool(chunks[0]) is False  # the chunk task returns without claiming (celery_worker)
    hot.tick()  # a round after the refusal stores nothing: the chunk never ran here
    with factory() as s:
        assert s.scalars(select(DeviceSample)).first() is None


def test_the_process_monitor_with_no_npu_is_open(db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    factory, _, chunks = _job(db_url)
    monkeypatch.setattr(thermal, "_monitor", None)
    settings = Settings(database_url=db_url, npu_smi=str(tmp_path / "no-npu-smi"), telemetry_interval_s=3600)
    mon = thermal.get_monitor(settings, factory)
    assert thermal.get_monitor(settings, factory) is mon  # one per process
    assert isinstance(mon.sampler, telemetry.NullSampler) and mon.gate.is_open
    assert mon.wait_until_cool(chunks[0]) is True
    with mon.running(chunks[0]):
        pass
    mon.stop()
    with factory() as s:
        assert s.scalars(select(DeviceSample)).first() is None


def test_migration_0002_applies_and_reverts(db_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    migrate(db_url)
    engine = make_engine(db_url)
    cols = {c["name"] for c in inspect(engine).get_columns("device_telemetry")}
    assert {"job_id", "device_id", "temp_c", "power_w", "memory_used_mb", "sampled_at"} <= cols
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))
    command.downgrade(cfg, "0001")
    assert "device_telemetry" not in inspect(engine).get_table_names()
    assert "jobs" in inspect(engine).get_table_names()
    command.upgrade(cfg, "heads")
    assert "device_telemetry" in inspect(engine).get_table_names()
    engine.dispose()
