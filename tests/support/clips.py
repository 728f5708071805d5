"""Clips made with PyAV for the video tests: good ones with known scenes, and every kind of bad one."""

from __future__ import annotations

import os
from pathlib import Path

import av
import numpy as np


def clip(
    path: Path,
    *,
    seconds: int = 4,
    fps: int = 10,
    width: int = 320,
    height: int = 240,
    scenes: int = 4,
    codec: str = "mpeg4",
    gop: int | None = None,
) -> Path:
    """``scenes`` flat colours of equal length with a white bar moving down: scene cuts at known times."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if gop is not None:
            stream.codec_context.gop_size = gop
        n = seconds * fps
        for i in range(n):
            k = i * scenes // n
            frame = np.zeros((height, width, 3), np.uint8)
            frame[:] = ((k * 70) % 256, (k * 130 + 40) % 256, (255 - k * 60) % 256)
            bar = (i * 3) % max(1, height - 20)
            frame[bar : bar + 20] = 255
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def audio_only(path: Path) -> Path:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=16000)
        for i in range(20):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 16000, i * 1024
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def bad_clips(root: Path) -> dict[str, str]:
    """File name -> the error code its item must end with (limits: see ``BAD_LIMITS``)."""
    good_mkv = clip(root / "_whole.mkv").read_bytes()
    (root / "_whole.mkv").unlink()
    (root / "truncated.mkv").write_bytes(good_mkv[: len(good_mkv) // 3])
    good_mp4 = clip(root / "_whole.mp4").read_bytes()
    (root / "_whole.mp4").unlink()
    (root / "truncated.mp4").write_bytes(good_mp4[: len(good_mp4) // 2])  # the index (moov) is at the end
    (root / "zero.mp4").write_bytes(b"")
    (root / "corrupt.webm").write_bytes(os.urandom(4096))
    audio_only(root / "audio.mp4")
    clip(root / "huge.mov", seconds=1, fps=2, width=1920, height=1088)
    clip(root / "long.mkv", seconds=40, fps=1, width=64, height=64)
    return {
        "truncated.mkv": "video_truncated",
        "truncated.mp4": "video_decode_error",
        "zero.mp4": "empty_file",
        "corrupt.webm": "video_decode_error",
        "audio.mp4": "video_no_stream",
        "huge.mov": "video_too_large",
        "long.mkv": "video_too_long",
    }


# The caps the bad clips are measured against: 720p frames, 30 s.
BAD_LIMITS = {"max_video_pixels": 1280 * 720, "max_video_seconds": 30.0}
