"""Energy per job: power samples from recorded npu-smi tables (run through the real npu-smi sampler), a
scripted NVML and a fake RAPL powercap tree, integrated per interval and split between two concurrent jobs
by their tokens; then booked on jobs in SQLite and PostgreSQL and shown per 1,000 items with a cost."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.platforms import current_platform
from engine.platforms.ascend import NpuSmiSampler
from engine.platforms.power import CounterPower, PowerSample, ReadingsPower, UnknownPower, nvml_meter, rapl_meter
from pipelines import image_tagging
from vlbatch.db import job_store
from vlbatch.db.energy import describe, job_energy
from vlbatch.db.models import Job
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from worker.energy import JOULES_PER_WH, EnergyBooker, EnergyLedger

pytestmark = pytest.mark.timeout(60)

FIXTURES = Path(__file__).resolve().parents[1] / "engine" / "fixtures" / "npu_smi"
BUSY_910B = FIXTURES / "info_910b3_8npus_drv24.1.0_busy_vllm_tp8.txt"  # NPU 0: 153.7 W, NPU 1: 155.2 W
IDLE_910B = FIXTURES / "info_910b3_8npus_drv25.2.0_idle.txt"  # NPU 0: 98.2 W, NPU 1: 96.8 W
DCMI_ERROR = FIXTURES / "error_npu-smi_in_container_dcmi_-8005.txt"
CARD_310P = FIXTURES / "info_310p3_1card_2chips_drv25.2.0.txt"  # Power NA on both chips of NPU 2
COMMON_310P = FIXTURES / "npu-smi_info_-t_common_-i_1_310p_gpustack_fixture.txt"  # the card: 45.2 W


def _npu_smi(tmp_path: Path, tables: list[Path]) -> str:
    """An npu-smi that prints ``tables`` in turn for ``info`` (then the last again) and the 310P card report
    for ``info -t common``."""
    (tmp_path / "tables").write_text("\n".join(map(str, tables)) + "\n")
    (tmp_path / "calls").write_text("0")
    script = tmp_path / "npu-smi"
    script.write_text(
        f"""#!/bin/sh
if [ "$2" = "-t" ]; then cat '{COMMON_310P}'; exit 0; fi
n=$(cat '{tmp_path}/calls'); echo $((n + 1)) > '{tmp_path}/calls'
total=$(wc -l < '{tmp_path}/tables'); k=$((n + 1)); [ $k -gt $total ] && k=$total
cat "$(sed -n "${{k}}p" '{tmp_path}/tables')"
"""
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def _clock(*times: float) -> Iterator[float]:
    return iter(times)


def test_recorded_npu_smi_power_is_split_between_two_jobs_by_tokens(tmp_path: Path) -> None:
    binary = _npu_smi(tmp_path, [BUSY_910B, IDLE_910B, DCMI_ERROR, BUSY_910B])
    times = _clock(0.0, 10.0, 20.0, 30.0, 40.0)
    meter = ReadingsPower(
        NpuSmiSampler(None, binary=binary), devices=[0, 1], source="npu-smi", clock=lambda: next(times)
    )
    ledger = EnergyLedger()
    assert ledger.close(meter.read()).wh == {}  # opens the first interval at the busy table

    ledger.add_tokens("job-a", 300)
    ledger.add_tokens("job-b", 100)
    share = ledger.close(meter.read())  # the idle table, 10 s later
    joules = (153.7 + 155.2 + 98.2 + 96.8) / 2 * 10  # trapezoid between the two tables' sums
    assert share.wh["job-a"] == pytest.approx(joules * 0.75 / JOULES_PER_WH)
    assert share.wh["job-b"] == pytest.approx(joules * 0.25 / JOULES_PER_WH)
    assert sum(share.wh.values()) == pytest.approx(0.6999, abs=1e-4)

    ledger.add_tokens("job-b", 50)
    failed = ledger.close(meter.read())  # npu-smi answers with its dcmi error: unknown, never a guess
    assert failed.wh == {} and failed.unmetered_tokens == {"job-b": 50}
    ledger.add_tokens("job-a", 10)
    after = ledger.close(meter.read())  # the interval after a gap has no known start either
    assert after.wh == {} and after.unmetered_tokens == {"job-a": 10}
    assert ledger.close(meter.read()).idle_wh == pytest.approx((153.7 + 155.2) * 10 / JOULES_PER_WH)


def test_a_310p_card_power_is_shared_by_its_chips(tmp_path: Path) -> None:
    binary = _npu_smi(tmp_path, [CARD_310P])
    times = _clock(0.0, 10.0)
    inv_devices = [r.device_id for r in NpuSmiSampler(None, binary=binary).sample()]
    assert len(inv_devices) == 2  # two chips on NPU 2, each handed the card's 45.2 W
    meter = ReadingsPower(
        NpuSmiSampler(None, binary=binary), devices=inv_devices[:1], source="npu-smi", clock=lambda: next(times)
    )
    ledger = EnergyLedger()
    ledger.close(meter.read())
    ledger.add_tokens("job-a", 1)
    assert ledger.close(meter.read()).wh["job-a"] == pytest.approx(45.2 / 2 * 10 / JOULES_PER_WH)


class _Nvml:
    """NVML as pynvml exposes it, with scripted energy counters (millijoules) per GPU."""

    def __init__(self, counters: list[list[int]]) -> None:
        self.counters = counters
        self.reads = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.counters[0])

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        value = self.counters[self.reads // self.nvmlDeviceGetCount()][handle]
        self.reads += 1
        return value


def test_nvml_energy_counters_split_two_jobs_exactly() -> None:
    nvml = _Nvml([[1_000_000, 5_000_000], [1_600_000, 5_900_000], [1_700_000, 6_000_000]])
    times = _clock(100.0, 105.0, 110.0)
    meter = nvml_meter([0, 1], nvml=nvml, clock=lambda: next(times))
    assert meter is not None and meter.source == "nvml"
    ledger = EnergyLedger()
    assert meter.read() is None  # one counter read dates no interval
    ledger.close(None)
    first = meter.read()
    assert first == PowerSample(105.0, (600 + 900) / 5, average=True)  # 1,500 J in 5 s
    ledger.close(first)  # opens the next interval at a known sample
    ledger.add_tokens("job-a", 1)
    ledger.add_tokens("job-b", 3)
    share = ledger.close(meter.read())  # 100 + 100 J
    assert share.wh == pytest.approx({"job-a": 50 / JOULES_PER_WH, "job-b": 150 / JOULES_PER_WH})


def test_rapl_counters_with_a_wrap_split_two_jobs(tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    for zone in ("intel-rapl:0", "intel-rapl:1", "intel-rapl:0:0"):  # the subzone is inside package 0
        (root / zone).mkdir(parents=True)
        (root / zone / "max_energy_range_uj").write_text("262143328850\n")

    def counters(p0: int, p1: int, core: int) -> None:
        for zone, value in (("intel-rapl:0", p0), ("intel-rapl:1", p1), ("intel-rapl:0:0", core)):
            (root / zone / "energy_uj").write_text(f"{value}\n")

    counters(10_000_000, 262_143_000_000, 5)
    times = _clock(0.0, 1.0, 3.0)
    meter = rapl_meter(root, clock=lambda: next(times))
    assert isinstance(meter, CounterPower)  # its probe read the counters once; the clock is not touched
    ledger = EnergyLedger()
    ledger.close(meter.read())  # t=0: the first read dates nothing
    counters(30_000_000, 262_143_000_000 + 10_000_000 - 262_143_328_850, 99)  # package 1 wrapped
    ledger.close(meter.read())  # t=1: opens at 20 J + 10 J in 1 s
    ledger.add_tokens("job-a", 2)
    ledger.add_tokens("job-b", 2)
    counters(70_000_000, 262_143_000_000 + 30_000_000 - 262_143_328_850, 0)
    share = ledger.close(meter.read())  # t=3: 40 J + 20 J in 2 s, halved
    assert share.wh == pytest.approx({"job-a": 30 / JOULES_PER_WH, "job-b": 30 / JOULES_PER_WH})
    assert isinstance(rapl_meter(tmp_path / "none"), UnknownPower)


def test_platforms_pick_their_power_source(tmp_path: Path) -> None:
    binary = _npu_smi(tmp_path, [IDLE_910B])
    ascend = current_platform("ascend-910b", npu_smi=binary).power_meter([0])
    assert ascend.source == "npu-smi"
    sample = ascend.read()
    assert sample is not None and sample.watts == pytest.approx(98.2)


class _Scripted:
    source = "scripted"

    def __init__(self, samples: list[PowerSample | None]) -> None:
        self.samples = samples

    def read(self) -> PowerSample | None:
        return self.samples.pop(0)


def test_booked_energy_shows_per_job_per_1000_items_and_cost(db_url: str, tmp_path: Path) -> None:
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    with sessions() as s:
        jobs = [
            job_store.create_job(
                s,
                pipeline=image_tagging.NAME,
                model="m",
                options={},
                items=[job_store.NewItem(inputs={"images": [f"/x/{i}.jpg"]}) for i in range(n)],
                chunk_size=10,
            ).id
            for n in (4, 2)
        ]
        s.commit()
    samples: list[PowerSample | None] = [PowerSample(0, 100.0), PowerSample(36, 100.0), None, PowerSample(72, 50.0)]
    booker = EnergyBooker(_Scripted(samples), sessions, interval_s=3600, worker="w1")
    booker.ledger.close(booker.meter.read())
    booker.ledger.add_tokens(jobs[0], 600)
    booker.ledger.add_tokens(jobs[1], 400)
    booker.tick()  # 3,600 J = 1 Wh: 0.6 and 0.4
    booker.ledger.add_tokens(jobs[1], 7)
    booker.tick()  # unknown power: 7 tokens unmetered
    booker.tick()  # no known start: nothing booked
    with sessions() as s:
        a, b = (s.get(Job, j) for j in jobs)
        assert a is not None and b is not None
        assert a.energy_wh == pytest.approx(0.6) and a.energy_unmetered_tokens == 0
        assert b.energy_wh == pytest.approx(0.4) and b.energy_unmetered_tokens == 7
        energy = job_energy(a, items_done=4, price_per_kwh=0.30)
        assert energy.wh_per_1000_items == pytest.approx(150.0)
        assert energy.cost == pytest.approx(0.6 / 1000 * 0.30)
        assert describe(energy, items_done=4).startswith("energy: 0.600 Wh over 4 items, 150.00 Wh per 1,000 items")
        a.energy_wh = None
        assert (
            describe(job_energy(a, items_done=4, price_per_kwh=None), items_done=4) == "energy: unknown (none booked)"
        )


def test_a_document_job_gets_its_share_beside_an_image_job(tmp_path: Path, tiny_model: Path) -> None:
    """An extraction over a text file and a photo job run through the feeder (scripted engine, the tiny
    model's tokenizer for chunking) between two recorded npu-smi tables: the document's engine answers
    book their tokens like the photo's, so each job gets the interval's energy in proportion to its tokens."""
    from PIL import Image
    from sqlalchemy import func, select

    from engine.runtime.config import EngineConfig
    from pipelines import extract
    from tests.support.scripted import ScriptedEngine, scripted_context, scripted_runner
    from vlbatch.db.models import DocumentPart, Item, Result
    from worker.feeder import Feeder

    db_url = f"sqlite:///{tmp_path / 'energy.db'}"
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    Image.new("RGB", (56, 56), (10, 100, 150)).save(inputs / "photo.png")
    (inputs / "notes.txt").write_text(
        "\n\n".join(f"Paragraph {i}: the buyer pays invoice {i} in 30 days." for i in range(80))
    )
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}
    with sessions() as s:
        photos = job_store.create_job(
            s,
            pipeline=image_tagging.NAME,
            model="m",
            options=image_tagging.TaggingOptions(max_tags=3).model_dump(),
            items=job_store.items_from_paths([str(inputs / "photo.png")], images_per_prompt=1),
            chunk_size=10,
        ).id
        document = job_store.create_job(
            s,
            pipeline=extract.NAME,
            model="m",
            options={"json_schema": schema, "max_array_items": 3, "max_string_chars": 10},
            items=[job_store.NewItem(inputs={"path": str(inputs / "notes.txt")}, ref="notes.txt")],
            chunk_size=10,
        ).id
        chunk_ids = [c for j in (photos, document) for c in job_store.chunks_of(s, job_id=j)]
        s.commit()

    binary = _npu_smi(tmp_path, [BUSY_910B, IDLE_910B])
    times = _clock(0.0, 10.0)
    meter = ReadingsPower(
        NpuSmiSampler(None, binary=binary), devices=[0, 1], source="npu-smi", clock=lambda: next(times)
    )
    booker = EnergyBooker(meter, sessions, interval_s=3600, worker="w1")  # one interval: start to close
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines, EngineConfig(model=str(tiny_model), max_model_len=1024))
    runner.load()
    ctx = scripted_context(sessions, runner, inputs)
    feeder = Feeder(ctx, energy=booker)
    for cid in chunk_ids:
        assert feeder.add_chunk(cid) is not None
    assert feeder.wait_idle(60)
    feeder.close()  # books the last interval

    with sessions() as s:
        failed = [(i.error_code, i.error_message) for i in s.scalars(select(Item).where(Item.error_code.is_not(None)))]
        assert failed == []
        results = {r.job_id: r for r in s.scalars(select(Result))}
        parts, part_tokens = s.execute(
            select(func.count(), func.sum(DocumentPart.prompt_tokens + DocumentPart.completion_tokens))
        ).one()
        tokens = {j: results[j].prompt_tokens + results[j].completion_tokens for j in (photos, document)}
        assert parts >= 2 and tokens[document] == part_tokens  # several map answers, all booked
        wh = {j: s.get(Job, j).energy_wh for j in (photos, document)}  # type: ignore[union-attr]
    joules = (153.7 + 155.2 + 98.2 + 96.8) / 2 * 10
    total = sum(tokens.values())
    assert wh[document] == pytest.approx(joules * tokens[document] / total / JOULES_PER_WH)
    assert wh[photos] == pytest.approx(joules * tokens[photos] / total / JOULES_PER_WH)
    assert wh[document] > wh[photos]  # more answers, more tokens, more of the energy
