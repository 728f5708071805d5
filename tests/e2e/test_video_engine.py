"""Video items on the real CPU engine with the tiny model: a folder of generated clips, a photo and every kind
of bad clip, tagged by ``tag_directory`` (the path of ``vlbatch tag``). The tiny Qwen2-VL has a video processor,
so each segment goes as the model's video input (``video_input: auto``): good clips get tags and segments with
the frames the budget allows, and the engine's prompt tokens are the rendered text with one video placeholder
grown to the video's tokens (two frames per set of tokens), not one image per frame; each bad clip fails with
its code; the photo is tagged as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from cli.evaluation.run import read_results
from engine.runtime.chat import ChatTemplate
from engine.runtime.runner import EngineRunner
from engine.vision import VideoGeometry, VisionGeometry
from pipelines import image_tagging
from pipelines.base import Segment
from preprocessing.video import video_tokens
from tests.support.clips import BAD_LIMITS, bad_clips, clip
from tests.support.engine import TEST_ENGINE
from vlbatch.db.tenants import global_roots
from vlbatch.settings import Settings
from worker.embedded import tag_directory
from worker.image_prep import prepare_video

pytestmark = [pytest.mark.engine("shared"), pytest.mark.timeout(900)]


def test_clips_are_tagged_within_the_budget_and_bad_clips_end_with_their_codes(
    tmp_path: Path, tiny_model: Path, shared_engine: EngineRunner
) -> None:
    album = tmp_path / "album"
    album.mkdir()
    clip(album / "beach.mp4", seconds=4)
    clip(album / "party.webm", seconds=3, codec="libvpx", width=256, height=144)
    Image.new("RGB", (96, 64), (200, 120, 40)).save(album / "photo.jpg")
    expected_failures = bad_clips(album)
    opts = image_tagging.TaggingOptions(max_tags=3, max_frames=6, fps=2.0, video_visual_tokens=96, frames_per_prompt=4)
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'jobs.db'}",
        engine=TEST_ENGINE,  # the shared engine's own, which the run takes
        **BAD_LIMITS,  # type: ignore[arg-type]
    )
    run = tag_directory(settings, directory=album, model_dir=tiny_model, opts=opts, out=tmp_path / "out.jsonl")

    rows = {Path(r["ref"]).name: r for r in read_results(tmp_path / "out.jsonl")}  # tags as names
    assert {n: r["error_code"] for n, r in rows.items() if r["status"] == "failed"} == expected_failures
    assert rows["photo.jpg"]["status"] == "succeeded" and "segments" not in rows["photo.jpg"]["output"]
    assert run.counts["succeeded"] == 3

    geo = VisionGeometry.from_model_dir(tiny_model)
    vgeo = VideoGeometry.from_model_dir(tiny_model)
    assert vgeo is not None
    chat = ChatTemplate.from_model_dir(tiny_model)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    readable = settings.model_copy(update={"allowed_input_roots": [album]})  # tag_directory allows its folder itself
    for name in ("beach.mp4", "party.webm"):
        row = rows[name]
        assert row["status"] == "succeeded", row
        budget = image_tagging.PIPELINE.video_budget(opts)
        video = prepare_video(
            str(album / name),
            budget,
            geometry=geo,
            settings=readable,
            roots=global_roots(readable),
            video=vgeo,
            per_prompt=opts.frames_per_prompt,
        )
        frames = [t for seg in row["output"]["segments"] for t in seg["frame_times"]]
        assert frames == [f.time_s for f in video.frames]
        assert len(frames) == min(opts.max_frames, int(video.duration_s * opts.fps))
        assert video.total_tokens <= opts.video_visual_tokens
        as_images = prepare_video(
            str(album / name), budget, geometry=geo, settings=readable, roots=global_roots(readable)
        )
        assert video.size.tokens > as_images.size.tokens  # pairs of frames merged: larger frames for the budget
        per_prompt = opts.frames_per_prompt
        groups = [frames[i : i + per_prompt] for i in range(0, len(frames), per_prompt)]
        assert [seg["frame_times"] for seg in row["output"]["segments"]] == groups
        assert 1 <= len(row["tags"]) <= opts.max_tags
        # The engine's prompt tokens: the rendered text (one video pad per segment) with the pad grown to the
        # video's tokens; sent as images (one pad per frame, each its frame's tokens) the count would differ.
        expected = 0
        for seg in row["output"]["segments"]:
            n = len(seg["frame_times"])
            user = image_tagging.video_prompt(opts, Segment(seg["start_s"], seg["end_s"], tuple(seg["frame_times"])))
            text = chat.render(image_tagging.SYSTEM_PREFIX, user, 0, 1)
            assert text.count("<|video_pad|>") == 1 and "<|image_pad|>" not in text
            tokens = video_tokens(
                n,
                video.size.height,
                video.size.width,
                patch_size=vgeo.patch_size,
                merge_size=vgeo.merge_size,
                temporal=2,
            )
            expected += len(tokenizer(text, add_special_tokens=False)["input_ids"]) + tokens - 1
        assert row["prompt_tokens"] == expected
