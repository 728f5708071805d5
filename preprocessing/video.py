"""Video items: open a clip, choose its frames, size them inside the item's visual-token budget (pure functions).

Decoding uses PyAV (``av``) rather than decord: PyAV ships manylinux/macOS wheels with FFmpeg bundled for
every current CPython, is maintained (monthly releases), reads MP4/MOV/MKV/WebM from a path or a file object,
lets us decode only keyframes (``skip_frame="NONKEY"``) and seek, and raises typed errors (``av.FFmpegError``)
we can turn into item codes. decord's last release predates Python 3.12 and it has no wheels for it.

Frames are chosen two ways (``FrameSelection``):

- ``even``: ``n`` instants evenly spaced over the clip (the middle of each of ``n`` equal spans); each one is a
  seek to the keyframe before it and a decode up to the instant.
- ``scene``: only keyframes are decoded (encoders place them at cuts, so they are the scene candidates); a
  keyframe whose small greyscale thumbnail differs from the previous one by at least ``scene_threshold``
  starts a scene; when there are more scenes than ``max_frames`` the sharpest cuts are kept.

``n`` is at most ``max_frames``, at most ``duration * fps``, and at most what the budget allows: every frame
costs at least the model's minimum tokens, and frames x tokens per frame never exceed ``max_visual_tokens``.
Memory stays bounded: only the chosen frames are kept, each already resized to its small target, and a frame
above ``max_pixels_guard`` is refused before any is decoded. Work is bounded by ``timeout_s``.
"""

from __future__ import annotations

import heapq
import io
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, BinaryIO

import av
from PIL import Image, ImageChops, ImageStat

from preprocessing.images import smart_resize, visual_tokens
from preprocessing.input_errors import InputError
from preprocessing.paths import confined_path
from vlbatch.errors import (
    EMPTY_FILE,
    NOT_FOUND,
    UNSUPPORTED_SOURCE,
    VIDEO_DECODE_ERROR,
    VIDEO_NO_STREAM,
    VIDEO_TIMEOUT,
    VIDEO_TOO_LARGE,
    VIDEO_TOO_LONG,
    VIDEO_TRUNCATED,
)
from vlbatch.inputs import VIDEO_SUFFIXES
from vlbatch.paths import is_local, local_path

__all__ = [
    "VIDEO_SUFFIXES",
    "ClipLimits",
    "Frame",
    "FrameSelection",
    "FrameSize",
    "VideoFrames",
    "decode_frames",
    "frame_budget",
    "is_video_source",
    "video_groups",
    "video_tokens",
]

_DATA_PREFIX = "data:video/"
# A clip whose data stops before this share of its declared duration is truncated, not short.
_TRUNCATED_SHARE = 0.9
_THUMB = (32, 32)


class FrameSelection(StrEnum):
    EVEN = "even"
    SCENE = "scene"


@dataclass(frozen=True)
class ClipLimits:
    max_bytes: int
    max_seconds: float
    max_pixels_guard: int
    timeout_s: float


@dataclass(frozen=True)
class FrameSize:
    """How many frames, at what size, fit the budget; ``tokens`` is per frame."""

    count: int
    height: int
    width: int
    tokens: int


@dataclass(frozen=True)
class Frame:
    time_s: float
    image: Image.Image


@dataclass(frozen=True)
class VideoFrames:
    frames: list[Frame]
    duration_s: float
    size: FrameSize
    temporal_patch_size: int = 1  # above 1: the frames go as videos of ``per_prompt`` frames
    per_prompt: int | None = None

    @property
    def total_tokens(self) -> int:
        n = len(self.frames)
        per = self.per_prompt or max(1, n)
        return video_groups(n, per_prompt=per, temporal_patch_size=self.temporal_patch_size) * self.size.tokens


def is_video_source(source: str) -> bool:
    """A path or URL with a video suffix, or a ``data:video/`` URL."""
    if source[:16].lower().startswith(_DATA_PREFIX):
        return True
    return Path(source.split("?", 1)[0]).suffix.lower() in VIDEO_SUFFIXES


def video_groups(count: int, *, per_prompt: int, temporal_patch_size: int) -> int:
    """How many sets of tokens ``count`` frames cost when sent as videos of ``per_prompt`` frames each: a
    video's frames are merged ``temporal_patch_size`` at a time, an odd tail padded with its last frame (the
    processor's own rule). One frame is one set when frames go as images (``temporal_patch_size`` 1)."""
    full, rest = divmod(count, per_prompt)
    return full * math.ceil(per_prompt / temporal_patch_size) + math.ceil(rest / temporal_patch_size)


def video_tokens(n_frames: int, height: int, width: int, *, patch_size: int, merge_size: int, temporal: int) -> int:
    """The LLM tokens of one video of ``n_frames`` frames of ``height`` x ``width`` (already on the grid)."""
    return math.ceil(n_frames / temporal) * visual_tokens(height, width, patch_size=patch_size, merge_size=merge_size)


def frame_budget(
    src_h: int,
    src_w: int,
    *,
    wanted: int,
    max_visual_tokens: int,
    factor: int,
    patch_size: int,
    merge_size: int,
    min_pixels: int,
    max_pixels: int,
    temporal_patch_size: int = 1,
    per_prompt: int | None = None,
) -> FrameSize:
    """The frame count and per-frame size so that the clip's tokens stay within ``max_visual_tokens``.

    Frames sent as images cost ``count * tokens``; sent as videos of ``per_prompt`` frames, every
    ``temporal_patch_size`` frames of a video share one set of tokens (``video_groups``). The per-set share of
    the budget gives ``max_pixels`` for ``smart_resize`` (the model processor's own algorithm, so its token
    count is ours); when even the smallest frame the processor allows does not fit ``wanted`` times, fewer
    frames are taken.
    """
    per = per_prompt or max(1, wanted)

    def groups(n: int) -> int:
        return video_groups(n, per_prompt=per, temporal_patch_size=temporal_patch_size)

    min_tokens = max(1, min_pixels // (factor * factor))
    count = max(1, wanted)
    while count > 1 and groups(count) * min_tokens > max_visual_tokens:
        count -= 1
    while True:
        share = max(min_tokens, max_visual_tokens // groups(count))
        cap = min(max_pixels, share * factor * factor)
        h, w = smart_resize(src_h, src_w, factor=factor, min_pixels=min(min_pixels, cap), max_pixels=cap)
        tokens = visual_tokens(h, w, patch_size=patch_size, merge_size=merge_size)
        if groups(count) * tokens <= max_visual_tokens or count == 1:
            return FrameSize(count, h, w, tokens)
        count -= 1


# --------------------------------------------------------------------------------------------- opening


def open_source(source: str, *, allowed_roots: list[Path], max_bytes: int) -> BinaryIO | str:
    """A path inside ``allowed_roots`` (read by FFmpeg from disk) or a ``data:video/...;base64,`` payload."""
    if source[:16].lower().startswith(_DATA_PREFIX):
        import base64
        import binascii

        header, sep, payload = source.partition(",")
        if not sep or not header.lower().endswith(";base64"):
            raise InputError(UNSUPPORTED_SOURCE, "only data:video/...;base64, URLs are supported")
        if len(payload) > (max_bytes * 4) // 3 + 4:
            raise InputError(VIDEO_TOO_LARGE, f"data URL payload exceeds {max_bytes} bytes")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InputError(VIDEO_DECODE_ERROR, f"invalid base64 in data URL: {exc}") from exc
        if not data:
            raise InputError(EMPTY_FILE, "the video data URL is empty")
        return io.BytesIO(data)
    if not is_local(source):
        raise InputError(UNSUPPORTED_SOURCE, f"videos are read from paths or data:video/ URLs, not {source[:40]!r}")
    raw = local_path(source)
    resolved = confined_path(raw, allowed_roots)
    if not resolved.is_file():
        raise InputError(NOT_FOUND, f"{raw}: not a regular file")
    size = resolved.stat().st_size
    if size == 0:
        raise InputError(EMPTY_FILE, f"{raw} is empty")
    if size > max_bytes:
        raise InputError(VIDEO_TOO_LARGE, f"{raw} is {size} bytes, limit {max_bytes} (VLBATCH_MAX_VIDEO_BYTES)")
    return str(resolved)


@contextmanager
def _ffmpeg_errors(what: str, deadline: _Deadline) -> Iterator[None]:
    try:
        yield
    except InputError:
        raise
    except (av.FFmpegError, OSError, ValueError, EOFError) as exc:
        deadline.check()  # FFmpeg's own I/O timeout (av.open's) surfaces as an error: the deadline says which
        raise InputError(VIDEO_DECODE_ERROR, f"{what}: {type(exc).__name__}: {exc}") from exc


class _Deadline:
    def __init__(self, seconds: float, what: str) -> None:
        self.at = time.monotonic() + seconds
        self.seconds = seconds
        self.what = what

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise InputError(VIDEO_TIMEOUT, f"{self.what}: frames not chosen within {self.seconds:.0f}s")


# -------------------------------------------------------------------------------------------- decoding


def decode_frames(
    source: str,
    *,
    allowed_roots: list[Path],
    limits: ClipLimits,
    selection: FrameSelection,
    max_frames: int,
    fps: float,
    scene_threshold: float,
    max_visual_tokens: int,
    factor: int,
    patch_size: int,
    merge_size: int,
    min_pixels: int,
    max_pixels: int,
    temporal_patch_size: int = 1,
    per_prompt: int | None = None,
) -> VideoFrames:
    """The clip's chosen frames as model-ready RGB images with their times; ``InputError`` names what is wrong."""
    what = source if not source.startswith("data:") else "video data URL"
    handle = open_source(source, allowed_roots=allowed_roots, max_bytes=limits.max_bytes)
    deadline = _Deadline(limits.timeout_s, what)
    with _ffmpeg_errors(what, deadline), av.open(handle, mode="r", timeout=limits.timeout_s) as container:
        if not container.streams.video:
            kinds = ", ".join(s.type for s in container.streams) or "none"
            raise InputError(VIDEO_NO_STREAM, f"{what} holds no video stream (streams: {kinds})")
        stream = container.streams.video[0]
        width, height = stream.codec_context.width, stream.codec_context.height
        if width <= 0 or height <= 0:
            raise InputError(VIDEO_DECODE_ERROR, f"{what}: video stream has no frame size ({width}x{height})")
        if width * height > limits.max_pixels_guard:
            raise InputError(
                VIDEO_TOO_LARGE, f"{what}: {width}x{height} frames exceed {limits.max_pixels_guard} pixels"
            )
        duration = _duration(container, stream)
        if duration > limits.max_seconds:
            raise InputError(VIDEO_TOO_LONG, f"{what} lasts {duration:.0f}s; the limit is {limits.max_seconds:.0f}s")
        wanted = max(1, min(max_frames, math.floor(duration * fps) or 1))
        size = frame_budget(
            height,
            width,
            wanted=wanted,
            max_visual_tokens=max_visual_tokens,
            factor=factor,
            patch_size=patch_size,
            merge_size=merge_size,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            temporal_patch_size=temporal_patch_size,
            per_prompt=per_prompt,
        )
        if selection == FrameSelection.EVEN:
            frames = _even(container, stream, duration, size, deadline)
        else:
            frames = _scenes(container, stream, size, scene_threshold, 1.0 / fps, deadline)
    if not frames:
        raise InputError(VIDEO_TRUNCATED, f"{what}: no frame decodes although the header declares {duration:.1f}s")
    return VideoFrames(frames, duration, size, temporal_patch_size, per_prompt)


def _duration(container: Any, stream: Any) -> float:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration / av.time_base)
    if stream.frames and stream.average_rate:
        return float(stream.frames / stream.average_rate)
    raise InputError(VIDEO_DECODE_ERROR, "the video declares no duration")


def _resized(frame: Any, size: FrameSize) -> Image.Image:
    # FFmpeg's swscale resizes while converting to RGB: the full-size RGB frame never exists in Python.
    image: Image.Image = frame.to_image(width=size.width, height=size.height, interpolation="BICUBIC")
    return image


def _time(frame: Any, stream: Any) -> float | None:
    if frame.pts is None:
        return None
    return float(frame.pts * stream.time_base)


def _even(container: Any, stream: Any, duration: float, size: FrameSize, deadline: _Deadline) -> list[Frame]:
    n = size.count
    targets = [duration * (i + 0.5) / n for i in range(n)]
    frames: list[Frame] = []
    last_seen = 0.0
    for target in targets:
        deadline.check()
        container.seek(int(target / stream.time_base), stream=stream, backward=True, any_frame=False)
        chosen = None
        for frame in container.decode(stream):
            deadline.check()
            t = _time(frame, stream)
            if t is None:
                continue
            last_seen = max(last_seen, t)
            if t + 1e-6 >= target or chosen is None:
                chosen = (t, frame)
            if t + 1e-6 >= target:
                break
        if chosen is None or chosen[0] + _span(stream) < target * _TRUNCATED_SHARE:
            raise InputError(
                VIDEO_TRUNCATED, f"the data ends near {last_seen:.1f}s of a declared {duration:.1f}s (truncated?)"
            )
        frames.append(Frame(round(chosen[0], 3), _resized(chosen[1], size)))
    return frames


def _span(stream: Any) -> float:
    """One frame's duration (0 when the rate is unknown)."""
    rate = stream.average_rate or stream.guessed_rate
    return float(1 / rate) if rate else 0.0


def _scenes(
    container: Any, stream: Any, size: FrameSize, threshold: float, min_gap_s: float, deadline: _Deadline
) -> list[Frame]:
    stream.codec_context.skip_frame = "NONKEY"
    best: list[tuple[float, float, Image.Image]] = []  # (score, time, image): a min-heap of the sharpest cuts
    previous: Image.Image | None = None
    last_kept = -math.inf
    for frame in container.decode(stream):
        deadline.check()
        t = _time(frame, stream)
        if t is None:
            continue
        thumb = frame.to_image(width=_THUMB[0], height=_THUMB[1]).convert("L")
        score = math.inf if previous is None else _difference(previous, thumb)
        previous = thumb
        if score < threshold or t - last_kept < min_gap_s:
            continue
        last_kept = t
        entry = (score, t, _resized(frame, size))
        if len(best) < size.count:
            heapq.heappush(best, entry)
        elif score > best[0][0]:
            heapq.heapreplace(best, entry)
    return [Frame(round(t, 3), image) for _, t, image in sorted(best, key=lambda e: e[1])]


def _difference(a: Image.Image, b: Image.Image) -> float:
    """Mean absolute difference of two greyscale thumbnails, 0 (same) to 1 (black against white)."""
    return float(ImageStat.Stat(ImageChops.difference(a, b)).mean[0]) / 255.0
