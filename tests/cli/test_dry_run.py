"""``vlbatch tag --dry-run``: no engine loaded and nothing stored; the shipped tiny model's own geometry and tokenizer
count the tokens, and the planner gives the engine time for a named card (on a CPU host, without one, for the
measured cpu-host card) until the database holds a measured rate (then the measured rate wins)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import func, select
from typer.testing import CliRunner

from cli.demo import DEMO_MODEL_DIR
from cli.main import app
from vlbatch.db.models import EngineSample, Job, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import get_settings


@pytest.fixture
def album(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "album"
    root.mkdir()
    for i in range(3):
        Image.new("RGB", (640, 480), (i, 80, 40)).save(root / f"{i}.jpg")
    monkeypatch.setenv("VLBATCH_DATABASE_URL", f"sqlite:///{tmp_path / 'runs.db'}")
    get_settings.cache_clear()
    yield root
    get_settings.cache_clear()


def test_tag_dry_run_counts_with_the_models_tokenizer_and_plans_then_measures(album: Path, tmp_path: Path) -> None:
    model = DEMO_MODEL_DIR.name
    args = ["tag", str(album), "--model", str(DEMO_MODEL_DIR), "--dry-run", "--card", "atlas-300i-duo"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "dry run: 3 items" in result.output
    assert "visual tokens  702" in result.output  # 3 x 234: 640x480 under the model's 200,704 max_pixels
    assert "preprocessor_config.json" in result.output and "characters a token" not in result.output
    assert "planner's roofline for 1 x atlas-300i-duo" in result.output
    sessions = make_sessionmaker(make_engine(f"sqlite:///{tmp_path / 'runs.db'}"))
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0  # nothing stored
        now = utcnow()
        for k in range(3):  # an earlier run of the model, sampled at one item a second
            s.add(
                EngineSample(
                    worker="w", model=model, sampled_at=now - timedelta(seconds=30 - 10 * k), items_done=10 * k
                )
            )
        s.commit()
    measured = CliRunner().invoke(app, args)
    assert measured.exit_code == 0, measured.output
    assert "engine time    3.00 s" in measured.output and "measured by 1 worker" in measured.output


def test_tag_dry_run_on_a_cpu_host_plans_for_the_measured_cpu_host_card_without_a_card(
    album: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLBATCH_PLATFORM", "cpu")
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["tag", str(album), "--model", str(DEMO_MODEL_DIR), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "planner's roofline for 1 x cpu-host" in result.output and "plus CPU host costs of" in result.output
    assert "engine time    unknown" not in result.output
    # On an accelerator platform the card is still asked for: no planner without one.
    monkeypatch.setenv("VLBATCH_PLATFORM", "ascend-310p")
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["tag", str(album), "--model", str(DEMO_MODEL_DIR), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "engine time    unknown" in result.output and "--card CARD" in result.output


def test_run_batch_dry_run_counts_the_valid_lines_and_stores_nothing(album: Path, tmp_path: Path) -> None:
    line = '{"custom_id": "%s", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "x", '
    line += '"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}}'
    batch = tmp_path / "batch.jsonl"
    batch.write_text("\n".join([line % "a", line % "b", "not json"]) + "\n")
    args = ["run-batch", "-i", str(batch), "-o", str(tmp_path / "out.jsonl"), "--model", str(DEMO_MODEL_DIR)]
    result = CliRunner().invoke(app, [*args, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "dry run: 2 items" in result.output and "engine time    unknown" in result.output
    assert not (tmp_path / "out.jsonl").exists()
    with make_sessionmaker(make_engine(f"sqlite:///{tmp_path / 'runs.db'}"))() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
