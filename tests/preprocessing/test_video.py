"""Video frames: generated clips (PyAV) in MP4/MOV/MKV/WebM, frames chosen evenly or by scene, sized inside the
clip's visual-token budget with the token count transformers' Qwen2-VL processor gives, and every bad clip
refused with its code within the time cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.vision import VideoGeometry, VisionGeometry
from pipelines.base import VideoBudget
from preprocessing.input_errors import InputError
from preprocessing.video import FrameSelection, frame_budget, is_video_source, video_groups, video_tokens
from tests.support.clips import BAD_LIMITS, bad_clips, clip
from vlbatch.db import job_store
from vlbatch.db.tenants import global_roots
from vlbatch.settings import Settings
from worker.image_prep import prepare_video, segments_of

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
    video = prepare_video(str(path), _budget(tokens=256), geometry=geo, settings=settings, roots=global_roots(settings))
    # 4 s at 2 fps allows 8 frames; 256 tokens / 8 frames = 32 tokens each at most.
    assert len(video.frames) == 8
    assert [f.time_s for f in video.frames] == pytest.approx([0.3, 0.8, 1.3, 1.8, 2.3, 2.8, 3.3, 3.8], abs=0.06)
    assert video.total_tokens <= 256
    merge = geo.merge_size
    for f in video.frames:
        assert f.image.size == (video.size.width, video.size.height)
        grid = processor(images=[f.image], return_tensors="np")["image_grid_thw"]  # type: ignore[operator]
        assert int(grid.prod()) // (merge * merge) == video.size.tokens


def _processor_tokens(processor: object, frames: object, merge: int) -> tuple[int, int, int]:
    """transformers' own count for one video: (tokens, height, width) of what its processor made of it."""
    grid = processor(videos=[frames], return_tensors="np")["video_grid_thw"]  # type: ignore[operator]
    t, h, w = (int(x) for x in grid[0])
    return t * h * w // (merge * merge), h, w


@pytest.mark.parametrize(
    ("src", "wanted", "per_prompt", "budget"),
    [
        ((1080, 1920), 8, 4, 96),
        ((144, 256), 5, 4, 256),
        ((480, 640), 3, 3, 64),
        ((720, 720), 1, 4, 128),
        ((200, 900), 7, 8, 300),
        ((1920, 1080), 6, 2, 48),
    ],
)
def test_video_input_token_counts_equal_the_processors(
    tiny_model: Path, src: tuple[int, int], wanted: int, per_prompt: int, budget: int
) -> None:
    """Frames sized for the model's video input (Qwen2-VL's temporal_patch_size 2: two frames, one set of
    tokens; an odd tail padded) cost exactly what transformers' video processor makes of them, and the clip
    stays within its budget."""
    import numpy as np
    from transformers import AutoVideoProcessor

    geo = VideoGeometry.from_model_dir(tiny_model)
    assert geo is not None and geo.temporal_patch_size == 2
    processor = AutoVideoProcessor.from_pretrained(str(tiny_model))
    size = frame_budget(
        *src,
        wanted=wanted,
        max_visual_tokens=budget,
        factor=geo.factor,
        patch_size=geo.patch_size,
        merge_size=geo.merge_size,
        min_pixels=geo.min_pixels,
        max_pixels=geo.frame_max_pixels(per_prompt),
        temporal_patch_size=geo.temporal_patch_size,
        per_prompt=per_prompt,
    )
    rng = np.random.default_rng(7)
    total = 0
    for start in range(0, size.count, per_prompt):
        n = min(per_prompt, size.count - start)
        frames = rng.integers(0, 256, (n, size.height, size.width, 3), dtype=np.uint8)
        theirs, grid_h, grid_w = _processor_tokens(processor, frames, geo.merge_size)
        assert (grid_h * geo.patch_size, grid_w * geo.patch_size) == (size.height, size.width)  # not resized again
        ours = video_tokens(
            n, size.height, size.width, patch_size=geo.patch_size, merge_size=geo.merge_size, temporal=2
        )
        assert ours == theirs
        total += theirs
    assert total == video_groups(size.count, per_prompt=per_prompt, temporal_patch_size=2) * size.tokens
    assert total <= budget
    assert size.count == wanted  # every budget here affords the frames asked for
    image = frame_budget(
        *src,
        wanted=wanted,
        max_visual_tokens=budget,
        factor=geo.factor,
        patch_size=geo.patch_size,
        merge_size=geo.merge_size,
        min_pixels=geo.min_pixels,
        max_pixels=geo.max_pixels,
    )
    assert size.tokens >= image.tokens  # the pairs merged: the same budget buys frames at least as large


def test_the_processors_per_clip_pixel_cap_is_followed(tiny_model: Path) -> None:
    """With ``cap_pixels_per_frame`` (the processor's bound on a whole clip) the frames are sized under it, so
    the processor does not shrink them again and its count is still ours."""
    import dataclasses

    import numpy as np
    from transformers import AutoVideoProcessor

    base = VideoGeometry.from_model_dir(tiny_model)
    assert base is not None
    geo = dataclasses.replace(base, cap_pixels_per_frame=True, max_video_tokens=100)
    processor = AutoVideoProcessor.from_pretrained(str(tiny_model), cap_pixels_per_frame=True, max_video_tokens=100)
    size = frame_budget(
        720,
        1280,
        wanted=8,
        max_visual_tokens=4096,
        factor=geo.factor,
        patch_size=geo.patch_size,
        merge_size=geo.merge_size,
        min_pixels=geo.min_pixels,
        max_pixels=geo.frame_max_pixels(8),
        temporal_patch_size=2,
        per_prompt=8,
    )
    assert size.height * size.width <= geo.frame_max_pixels(8) < base.max_pixels  # the cap, not the budget, binds
    frames = np.zeros((8, size.height, size.width, 3), dtype=np.uint8)
    theirs, _, _ = _processor_tokens(processor, frames, geo.merge_size)
    assert theirs == 4 * size.tokens


def test_a_clip_for_the_video_input_costs_what_the_processor_counts(tmp_path: Path, tiny_model: Path) -> None:
    import numpy as np
    from transformers import AutoVideoProcessor

    from worker.image_prep import video_clip

    path = clip(tmp_path / "c.mp4", seconds=4)
    vgeo = VideoGeometry.from_model_dir(tiny_model)
    assert vgeo is not None
    settings = Settings(allowed_input_roots=[tmp_path])
    budget = _budget(tokens=96, max_frames=7)
    video = prepare_video(
        str(path),
        budget,
        geometry=VisionGeometry.from_model_dir(tiny_model),
        settings=settings,
        roots=global_roots(settings),
        video=vgeo,
        per_prompt=4,
    )
    assert len(video.frames) == 7  # 4 s at 2 fps allows 8; max_frames is 7
    processor = AutoVideoProcessor.from_pretrained(str(tiny_model))
    counted = 0
    for seg in segments_of(video, 4):
        frames, metadata = video_clip(
            [f.image for f in video.frames if f.time_s in seg.frame_times], list(seg.frame_times)
        )
        assert frames.dtype == np.uint8 and frames.shape == (
            len(seg.frame_times),
            video.size.height,
            video.size.width,
            3,
        )
        assert metadata["total_num_frames"] == len(seg.frame_times) and metadata["do_sample_frames"] is False
        counted += _processor_tokens(processor, frames, vgeo.merge_size)[0]
    assert counted == video.total_tokens <= 96


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
    video = prepare_video(
        str(path), _budget("scene", fps=1.0), geometry=geo, settings=settings, roots=global_roots(settings)
    )
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
            prepare_video(
                str(tmp_path / name), _budget(), geometry=geo, settings=settings, roots=global_roots(settings)
            )
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
            roots=global_roots(settings),
        )
    assert err.value.code == "video_timeout"


def test_directory_items_keep_each_video_alone() -> None:
    items = job_store.items_from_paths(["/a/1.jpg", "/a/2.jpg", "/a/c.MP4", "/a/3.jpg"], images_per_prompt=2)
    assert [it.inputs["images"] for it in items] == [["/a/1.jpg", "/a/2.jpg"], ["/a/3.jpg"], ["/a/c.MP4"]]
    assert is_video_source("data:video/webm;base64,AAAA") and not is_video_source("/a/1.jpg")
    assert FrameSelection("scene") is FrameSelection.SCENE


def test_clips_go_as_video_only_to_a_model_with_a_video_input(tmp_path: Path, tiny_model: Path) -> None:
    """The tiny Qwen2-VL has a video processor and a template with a video placeholder; a copy without either
    sends its clips as images (``auto``), and refuses ``video_input: video`` with ``video_not_supported``."""
    import json
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    from engine.runtime.chat import ChatTemplate
    from engine.runtime.config import EngineConfig
    from engine.runtime.runner import EngineRunner
    from vlbatch.db.session import make_engine, make_sessionmaker
    from vlbatch.errors import VIDEO_NOT_SUPPORTED
    from worker.context import WorkerContext
    from worker.image_prep import video_geometry_for

    imageonly = tmp_path / "image-only"
    shutil.copytree(tiny_model, imageonly, ignore=shutil.ignore_patterns("*.safetensors"))
    (imageonly / "video_preprocessor_config.json").unlink()
    config = json.loads((imageonly / "config.json").read_text())
    del config["video_token_id"]
    (imageonly / "config.json").write_text(json.dumps(config))
    assert VideoGeometry.from_model_dir(imageonly) is None
    assert EngineConfig(model=str(imageonly)).mm_limits() == {"image": 4}
    assert EngineConfig(model=str(tiny_model)).mm_limits() == {"image": 4, "video": 1}
    assert EngineConfig(model=str(tiny_model), limit_videos_per_prompt=0).mm_limits() == {"image": 4}

    def context(model_dir: Path, **engine: int) -> WorkerContext:
        return WorkerContext(
            settings=Settings(),
            sessions=make_sessionmaker(make_engine(f"sqlite:///{tmp_path / 'x.db'}")),
            runner=EngineRunner(EngineConfig(model=str(model_dir), **engine)),  # never loaded
            model_name="m",
            chat=ChatTemplate.from_model_dir(model_dir),
            pool=ThreadPoolExecutor(1),
            video_geometry=VideoGeometry.from_model_dir(model_dir),
        )

    qwen = context(tiny_model)
    assert qwen.chat.supports_video
    assert video_geometry_for(qwen, "auto") == VideoGeometry.from_model_dir(tiny_model)
    assert video_geometry_for(qwen, "video") is not None
    assert video_geometry_for(qwen, "images") is None
    assert video_geometry_for(context(tiny_model, limit_videos_per_prompt=0), "auto") is None
    other = context(imageonly)
    assert video_geometry_for(other, "auto") is None
    with pytest.raises(InputError) as refused:
        video_geometry_for(other, "video")
    assert refused.value.code == VIDEO_NOT_SUPPORTED
