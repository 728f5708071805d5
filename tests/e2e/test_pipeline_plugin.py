"""Adding a pipeline is one module plus one registry line, and it then runs end to end on the real engine
through the same feeder as every other pipeline (embedded path: SQLite, no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import create_engine, text

from engine.runtime.runner import EngineRunner
from pipelines import registry
from tests.support import plugin_pipeline
from tests.support.engine import TEST_ENGINE
from vlbatch.db import job_store
from vlbatch.settings import Settings
from worker.embedded import run_embedded

pytestmark = [pytest.mark.engine("shared"), pytest.mark.timeout(900)]


def test_a_registered_pipeline_runs_end_to_end(tmp_path: Path, tiny_model: Path, shared_engine: EngineRunner) -> None:
    registry.register(plugin_pipeline.PIPELINE)  # the one registry line
    try:
        album = tmp_path / "album"
        album.mkdir()
        paths = []
        sizes: dict[str, tuple[int, int]] = {}
        for i, colour in enumerate(["red", "green", "blue", "white", "black", "grey"] * 2):
            Image.new("RGB", (60 + 10 * i, 40), colour).save(album / f"{i:02d}.png")
            paths.append(str(album / f"{i:02d}.png"))
            sizes[f"{i:02d}.png"] = (60 + 10 * i, 40)
        (album / "broken.png").write_bytes(b"not a png")
        paths.append(str(album / "broken.png"))
        db = f"sqlite:///{tmp_path / 'plugin.db'}"
        run = run_embedded(
            Settings(database_url=db, engine=TEST_ENGINE, chunk_size=4),
            root=album,
            model_dir=tiny_model,
            pipeline="dominant_colour",
            options={"max_visual_tokens": 16},
            items=[job_store.NewItem(inputs={"images": [p]}, ref=Path(p).name) for p in paths],
            out=tmp_path / "out.jsonl",
        )
    finally:
        registry.unregister("dominant_colour")
    assert run.counts["succeeded"] + run.counts["failed"] == len(paths)
    assert run.counts["failed"] >= 1
    eng = create_engine(db)
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT i.ref, i.status, i.error_code, r.output, r.pipeline_version, r.prompt_tokens FROM items i "
                "JOIN results r ON r.item_id = i.id"
            )
        ).all()
    eng.dispose()
    assert len(rows) == len(paths)
    by_ref = {r[0]: r for r in rows}
    assert by_ref["broken.png"][2] == "decode_error"
    import json

    ok = [r for r in rows if r[1] == "succeeded"]
    assert ok, rows
    for ref, _, _, output, version, prompt_tokens in ok:
        out = json.loads(output) if isinstance(output, str) else output
        # The pipeline's own fields, and the photo's header facts every image pipeline's result carries.
        assert set(out) == {"colour", "bright", "photos"}, (ref, out)
        assert out["colour"] in plugin_pipeline.COLOURS and isinstance(out["bright"], bool)
        assert [(p["width"], p["height"]) for p in out["photos"]] == [sizes[ref]], (ref, out["photos"])
        assert version == "7" and prompt_tokens > 0
    # the two requests of each item were both counted
    assert run.stats.items_done == len(paths)
