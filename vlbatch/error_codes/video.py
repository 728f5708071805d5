"""Error codes of a video item's inputs (``preprocessing.video``, ``worker.image_prep``).

Registered in the order below; ``vlbatch.errors`` re-exports each constant, and callers import it from there.
"""

from __future__ import annotations

from vlbatch.error_codes.registry import _define

VIDEO_DECODE_ERROR = _define(
    "video_decode_error",
    422,
    {"item"},
    "The video file does not open or decode (corrupt, or not a video container).",
)
VIDEO_TRUNCATED = _define(
    "video_truncated", 422, {"item"}, "The video's data ends well before the duration its header declares."
)
VIDEO_NO_STREAM = _define("video_no_stream", 422, {"item"}, "The file holds no video stream (audio only, or data).")
VIDEO_TOO_LONG = _define("video_too_long", 413, {"item"}, "The video is longer than `VLBATCH_MAX_VIDEO_SECONDS`.")
VIDEO_TOO_LARGE = _define(
    "video_too_large",
    413,
    {"item"},
    "The video's frame size or file size is above `VLBATCH_MAX_VIDEO_PIXELS` or `VLBATCH_MAX_VIDEO_BYTES`.",
)
VIDEO_TIMEOUT = _define(
    "video_timeout",
    422,
    {"item"},
    "Choosing and decoding the video's frames took longer than `VLBATCH_VIDEO_DECODE_TIMEOUT_S`.",
)
VIDEO_NOT_SUPPORTED = _define(
    "video_not_supported",
    422,
    {"item"},
    "The job's pipeline takes no video, or a video shares its item with other inputs (a video is an item alone).",
)
