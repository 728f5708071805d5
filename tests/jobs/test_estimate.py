"""Dry runs (jobs/submit.py::dry_run, jobs/estimate.py): nothing is stored; each image item's visual tokens come from
its header as the HF processor would size it; the engine time comes from the workers' measured rate, else from the
planner; Wh from the energy booked to the model's jobs; a deadline the estimate misses is a warning, or a refusal
with strict_deadline (and a submit refuses it the same way). On SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from jobs.estimate import PlannerRate, Profile
from jobs.refusals import JobRefused
from jobs.request import JobRequest
from jobs.submit import dry_run, submit
from pipelines import image_tagging
from vlbatch.db import job_store
from vlbatch.db.models import EngineSample, Item, Job, Result, utcnow
from vlbatch.db.rates import measured_rate
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.errors import DEADLINE_UNMEETABLE
from vlbatch.settings import Settings

# (width, height, EXIF orientation) -> visual tokens under the default budget of 256, as
# transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize sizes them (factor 28, min 3136,
# max 256 * 784): 640x480 -> 364x504 -> 234; 1000x100 -> 112x1008 -> 144.
PHOTOS = [(640, 480, 1, 234), (4000, 3000, 1, 234), (480, 640, 6, 234), (1000, 100, 1, 144)]


def _album(root: Path) -> list[str]:
    root.mkdir(exist_ok=True)
    paths = []
    for i, (w, h, orientation, _) in enumerate(PHOTOS):
        path = root / f"{i}.jpg"
        exif = Image.Exif()
        exif[0x0112] = orientation
        Image.new("RGB", (w, h), (120, 90, 60)).save(path, exif=exif.tobytes())
        paths.append(str(path))
    return paths


def _request(paths: list[str], options: dict[str, object] | None = None, **kw: object) -> JobRequest:
    return JobRequest(
        pipeline=image_tagging.NAME,
        options=options or image_tagging.TaggingOptions().model_dump(),
        items=job_store.items_from_paths(paths, images_per_prompt=1),
        model="m",
        **kw,  # type: ignore[arg-type]
    )


def _setup(db_url: str, tmp_path: Path) -> tuple[sessionmaker[Session], Settings, list[str]]:
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    paths = _album(tmp_path / "album")
    return sessions, Settings(allowed_input_roots=[tmp_path / "album"], price_per_kwh=0.3), paths


def _worker_measured(s: Session, *, items_per_s: float) -> None:
    """A worker serving 'm' that finished items at ``items_per_s`` over two busy minutes, then idled."""
    now = utcnow()
    for k, (steps, items) in enumerate(
        [(0, 0), (500, 60 * items_per_s), (1000, 120 * items_per_s), (1000, 120 * items_per_s)]
    ):
        s.add(
            EngineSample(
                worker="w1", model="m", sampled_at=now - timedelta(minutes=4 - k), steps=steps, items_done=int(items)
            )
        )
    s.commit()


def _jobs(s: Session) -> int:
    return int(s.scalar(select(func.count()).select_from(Job)) or 0)


def test_a_dry_run_counts_tokens_from_headers_and_stores_nothing(db_url: str, tmp_path: Path) -> None:
    sessions, settings, paths = _setup(db_url, tmp_path)
    with sessions() as s:
        e = dry_run(s, settings, _request(paths))
        assert _jobs(s) == 0 and s.scalar(select(func.count()).select_from(Item)) == 0
    assert e.items == 4
    assert [t.visual_tokens for t in e.per_item] == [tokens for *_, tokens in PHOTOS]
    assert e.visual_tokens == sum(tokens for *_, tokens in PHOTOS)
    assert all(t.text_tokens > 0 and t.output_tokens > 0 for t in e.per_item)
    assert "characters a token" in e.tokens  # no tokenizer given: said so
    # No worker has measured 'm', and no planner here: unknown, and why.
    assert e.engine_seconds.value is None and "no worker has measured" in e.engine_seconds.assumption
    assert e.wh.value is None and e.cost.value is None


def test_the_engine_time_comes_from_the_measured_rate_else_the_planner(db_url: str, tmp_path: Path) -> None:
    sessions, settings, paths = _setup(db_url, tmp_path)
    seen: list[Profile] = []

    def planner(profile: Profile) -> PlannerRate:
        seen.append(profile)
        return PlannerRate(items_per_s=0.5, power_w=150.0, assumption="the planner's roofline at 50 %")

    with sessions() as s:
        planned = dry_run(s, settings, _request(paths), planner=planner)
        assert planned.engine_seconds.value == pytest.approx(8.0)  # 4 items at 0.5 items/s
        assert "planner" in planned.engine_seconds.assumption
        assert planned.wh.value == pytest.approx(150.0 * 8 / 3600)
        assert planned.cost.value == pytest.approx(planned.wh.value / 1000 * 0.3)
        assert seen[0].visual_tokens_per_image == sum(t for *_, t in PHOTOS) // 4 and seen[0].images_per_prompt == 1

        _worker_measured(s, items_per_s=2.0)
        measured = dry_run(s, settings, _request(paths), planner=planner)
    # 4 items at the 2 items/s of the busy intervals (the idle minute after does not slow the rate).
    assert measured.engine_seconds.value == pytest.approx(2.0)
    assert "measured by 1 worker" in measured.engine_seconds.assumption


def test_items_finishing_in_bursts_are_rated_over_the_time_the_engine_worked_on_them(db_url: str) -> None:
    """Long answers: the engine steps every minute, but a batch of 120 items ends only every second minute. The
    rate is 240 items over the 4 minutes it worked (1 item/s), not over the 2 minutes in which items ended."""
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    now = utcnow()
    with sessions() as s:
        for k, (steps, items) in enumerate([(0, 0), (300, 0), (600, 120), (900, 120), (1200, 240), (1200, 240)]):
            at = now - timedelta(minutes=5 - k)
            s.add(EngineSample(worker="w1", model="m", sampled_at=at, steps=steps, items_done=items))
        s.commit()
        rate = measured_rate(s, model="m", now=now)
    assert rate is not None and rate.items_per_s == pytest.approx(1.0) and rate.items == 240


def _answered(
    s: Session, paths: list[str], options: dict[str, object], tokens: list[int], *, reused: bool = False
) -> None:
    """A job of 'm' whose items were answered with ``tokens`` output tokens each (or reused an earlier answer)."""
    job = submit(s, Settings(), _request(paths, options=options), publish=False)
    ids = s.scalars(select(Item.id).where(Item.job_id == job.id).order_by(Item.seq)).all()
    for item_id, n in zip(ids, tokens, strict=False):
        s.add(
            Result(
                item_id=item_id,
                job_id=job.id,
                completion_tokens=n,
                model="m",
                pipeline_version="1",
                options_hash=job.options_hash,
                reused_from=ids[0] if reused else None,
            )
        )
    s.commit()


def test_the_planner_is_given_the_mean_length_of_the_models_earlier_answers_with_these_options(
    db_url: str, tmp_path: Path
) -> None:
    sessions, settings, paths = _setup(db_url, tmp_path)
    seen: list[Profile] = []

    def planner(profile: Profile) -> PlannerRate:
        seen.append(profile)
        return PlannerRate(items_per_s=0.5, power_w=None, assumption="the planner")

    default = image_tagging.TaggingOptions().model_dump()
    with sessions() as s:
        dry_run(s, settings, _request(paths), planner=planner)
        assert seen[-1].expected_output_tokens is None and seen[-1].expected_from == ""  # never answered: the budget
        _answered(s, paths, default, [30, 50, 0])  # 0: no answer of its own (failed), not counted
        _answered(s, paths, default, [900, 900], reused=True)  # reused answers took no engine time
        _answered(s, paths, {**default, "caption": True}, [700, 700])  # other options, other answers
        dry_run(s, settings, _request(paths), planner=planner)
    assert seen[-1].expected_output_tokens == 40
    assert seen[-1].expected_from == "the mean of 2 earlier answers of 'm' with these options"
    assert seen[-1].output_tokens > 40  # the budget is still the planner's to size the context with


def test_a_missed_deadline_warns_or_is_refused_when_strict(db_url: str, tmp_path: Path) -> None:
    sessions, settings, paths = _setup(db_url, tmp_path)
    with sessions() as s:
        _worker_measured(s, items_per_s=0.01)  # 4 items take 400 s
        soon = utcnow() + timedelta(seconds=60)
        e = dry_run(s, settings, _request(paths, deadline=soon))
        assert e.warnings and "after the deadline" in e.warnings[0]
        with pytest.raises(JobRefused) as refused:
            dry_run(s, settings, _request(paths, deadline=soon, strict_deadline=True))
        assert refused.value.code == DEADLINE_UNMEETABLE
        with pytest.raises(JobRefused):
            submit(s, settings, _request(paths, deadline=soon, strict_deadline=True), publish=False)
        s.rollback()
        assert _jobs(s) == 0  # refused before anything was stored
        later = utcnow() + timedelta(hours=1)
        assert dry_run(s, settings, _request(paths, deadline=later, strict_deadline=True)).warnings == []
        job = submit(s, settings, _request(paths, deadline=soon), publish=False)  # accepted: a warning only
        assert job.deadline is not None and _jobs(s) == 1
