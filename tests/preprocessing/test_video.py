"""Video frames: generated clips (PyAV) in MP4/MOV/MKV/WebM, frames chosen evenly or by scene, sized inside the
clip's visual-token budget with the token count transformers' Qwen2-VL processor gives, and every bad clip
refused with its code within the time cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.vision import VisionGeometry
from pipelines.base import VideoBudget
from preprocessing.errors import InputError
from preprocessing.video import FrameSelection, frame_budget, is_video_source
from tests.preprocessing.clips import BAD_LIMITS, bad_clips, clip
from vlbatch.db import crud
from vlbatch.settings import Settings
from worker.image_items import prepare_video, segments_of

pytestmark = pytest.mark.timeout(120)


def _budget(selection: str = "even", *, max_frames: int = 8, fps: float = 2.0, tokens: int = 256) -> VideoBudget:
    return VideoBudget(max_frames, fps, selection, 0.1, tokens, 4)


@pytest.fixture(scope="module")
def processor(tiny_model: Path) -> object:
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(str(tiny_model))


@pytest.mark.parametrize("suffix", [".mp4", ".mov", ".mkv", ".webm"])
def test_even_frames_fit_the_budget_with_the_processors_token_count(
    tmp_path: Path, tiny_model: Path, processor: object, suffix: str
) -> None:
    path = clip(tmp_path / f"c{suffix}", codec="libvpx" if suffix == ".webm" else "mpeg4")
    geo = VisionGeometry.from_model_dir(tiny_model)
    settings = Settings(allowed_input_roots=[tmp_path])
    video = prepare_video(str(path), _budget(tokens=256), geometry=geo, settings=settings)
    # 4 s at 2 fps allows 8 frames; 256 tokens / 8 frames = 32 tokens each at most.
    assert len(video.frames) == 8
    assert [f.time_s for f in video.frames] == pytest.approx([0.3, 0.8, 1.3, 1.8, 2.3, 2.8, 3.3, 3.8], abs=0.06)
    assert video.total_tokens <= 256
    merge = geo.merge_size
    for f in video.frames:
        assert f.image.size == (video.size.width, video.size.height)
        grid = processor(images=[f.image], return_tensors="np")["image_grid_thw"]  # type: ignore[operator]
        assert int(grid.prod()) // (merge * merge) == video.size.tokens


def test_the_budget_takes_fewer_frames_when_each_would_fall_below_the_minimum(tiny_model: Path) -> None:
    geo = VisionGeometry.from_model_dir(tiny_model)
    min_tokens = geo.min_pixels // (geo.factor**2)
    size = frame_budget(
        1080,
        1920,
        wanted=64,
        max_visual_tokens=min_tokens * 10,
        factor=geo.factor,
        patch_size=geo.patch_size,
        merge_size=geo.merge_size,
        min_pixels=geo.min_pixels,
        max_pixels=geo.max_pixels,
    )
    assert size.count <= 10 and size.count * size.tokens <= min_tokens * 10


def test_scene_frames_start_each_scene(tmp_path: Path, tiny_model: Path) -> None:
    # A keyframe every 5 frames (0.5 s); the colour changes at 0, 1.5, 3 and 4.5 s.
    path = clip(tmp_path / "s.mkv", seconds=6, scenes=4, gop=5)
    settings = Settings(allowed_input_roots=[tmp_path])
    geo = VisionGeometry.from_model_dir(tiny_model)
    video = prepare_video(str(path), _budget("scene", fps=1.0), geometry=geo, settings=settings)
    assert [f.time_s for f in video.frames] == pytest.approx([0.0, 1.5, 3.0, 4.5], abs=0.01)
    segs = segments_of(video, 3)
    assert [(s.start_s, s.end_s, len(s.frame_times)) for s in segs] == [(0.0, 4.5, 3), (4.5, 6.0, 1)]


def test_every_bad_clip_ends_with_its_code(tmp_path: Path, tiny_model: Path) -> None:
    expected = bad_clips(tmp_path)
    settings = Settings(allowed_input_roots=[tmp_path], video_decode_timeout_s=30, **BAD_LIMITS)  # type: ignore[arg-type]
    geo = VisionGeometry.from_model_dir(tiny_model)
    got = {}
    for name in expected:
        with pytest.raises(InputError) as err:
            prepare_video(str(tmp_path / name), _budget(), geometry=geo, settings=settings)
        got[name] = err.value.code
    assert got == expected


def test_a_clip_over_the_time_cap_is_refused(tmp_path: Path, tiny_model: Path) -> None:
    path = clip(tmp_path / "slow.mp4", seconds=2)
    settings = Settings(allowed_input_roots=[tmp_path], video_decode_timeout_s=1e-6)
    with pytest.raises(InputError) as err:
        prepare_video(
            str(path),
            _budget(max_frames=64, fps=10),
            geometry=VisionGeometry.from_model_dir(tiny_model),
            settings=settings,
        )
    assert err.value.code == "video_timeout"


def test_directory_items_keep_each_video_alone() -> None:
    items = crud.items_from_paths(["/a/1.jpg", "/a/2.jpg", "/a/c.MP4", "/a/3.jpg"], images_per_prompt=2)
    assert [it.inputs["images"] for it in items] == [["/a/1.jpg", "/a/2.jpg"], ["/a/3.jpg"], ["/a/c.MP4"]]
    assert is_video_source("data:video/webm;base64,AAAA") and not is_video_source("/a/1.jpg")
    assert FrameSelection("scene") is FrameSelection.SCENE
