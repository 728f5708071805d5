"""Video items on the real CPU engine with the tiny model: a folder of generated clips, a photo and every kind
of bad clip, tagged by ``tag_directory`` (the path of ``vlbatch tag``). Good clips get tags and segments with
the frames the budget allows and the prompt tokens the processor's frame size implies; each bad clip fails
with its code; the photo is tagged as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from engine.runtime.chat import ChatTemplate
from engine.vision import VisionGeometry
from pipelines import image_tagging
from pipelines.base import Segment
from tests.preprocessing.clips import BAD_LIMITS, bad_clips, clip
from vlbatch.settings import Settings
from worker.embedded import tag_directory
from worker.image_items import prepare_video

pytestmark = [pytest.mark.engine, pytest.mark.timeout(900)]


def test_clips_are_tagged_within_the_budget_and_bad_clips_end_with_their_codes(
    tmp_path: Path, tiny_model: Path
) -> None:
    pytest.importorskip("vllm")
    album = tmp_path / "album"
    album.mkdir()
    clip(album / "beach.mp4", seconds=4)
    clip(album / "party.webm", seconds=3, codec="libvpx", width=256, height=144)
    Image.new("RGB", (96, 64), (200, 120, 40)).save(album / "photo.jpg")
    expected_failures = bad_clips(album)
    opts = image_tagging.TaggingOptions(max_tags=3, max_frames=6, fps=2.0, video_visual_tokens=96, frames_per_prompt=4)
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'jobs.db'}",
        engine={
            "dtype": "float32",
            "max_num_seqs": 8,
            "max_model_len": 2048,
            "kv_cache_memory_bytes": 128 << 20,
            "enforce_eager": True,
        },
        **BAD_LIMITS,  # type: ignore[arg-type]
    )
    run = tag_directory(settings, directory=album, model_dir=tiny_model, opts=opts, out=tmp_path / "out.jsonl")

    rows = {Path(r["ref"]).name: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    assert {n: r["error_code"] for n, r in rows.items() if r["status"] == "failed"} == expected_failures
    assert rows["photo.jpg"]["status"] == "succeeded" and "segments" not in rows["photo.jpg"]
    assert run.counts["succeeded"] == 3

    geo = VisionGeometry.from_model_dir(tiny_model)
    chat = ChatTemplate.from_model_dir(tiny_model)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    readable = settings.model_copy(update={"allowed_input_roots": [album]})  # tag_directory allows its folder itself
    for name in ("beach.mp4", "party.webm"):
        row = rows[name]
        assert row["status"] == "succeeded", row
        video = prepare_video(
            str(album / name), image_tagging.PIPELINE.video_budget(opts), geometry=geo, settings=readable
        )
        frames = [t for seg in row["segments"] for t in seg["frame_times"]]
        assert frames == [f.time_s for f in video.frames]
        assert len(frames) == min(opts.max_frames, int(video.duration_s * opts.fps))
        assert len(frames) * video.size.tokens <= opts.video_visual_tokens
        per_prompt = opts.frames_per_prompt
        groups = [frames[i : i + per_prompt] for i in range(0, len(frames), per_prompt)]
        assert [seg["frame_times"] for seg in row["segments"]] == groups
        assert 1 <= len(row["tags"]) <= opts.max_tags
        # The engine's prompt tokens: the rendered text (one pad per frame) with each pad grown to the frame's tokens.
        expected = 0
        for seg in row["segments"]:
            n = len(seg["frame_times"])
            user = image_tagging.video_prompt(opts, Segment(seg["start_s"], seg["end_s"], tuple(seg["frame_times"])))
            text = chat.render(image_tagging.SYSTEM_PREFIX, user, n)
            expected += len(tokenizer(text, add_special_tokens=False)["input_ids"]) + n * (video.size.tokens - 1)
        assert row["prompt_tokens"] == expected
