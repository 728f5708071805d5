"""Image loading, decoding and Qwen-VL style resizing (pure functions, Pillow + httpx only)."""

from __future__ import annotations

import base64
import binascii
import io
import math
import warnings
from pathlib import Path

import httpx
from PIL import Image, ImageOps, UnidentifiedImageError

from preprocessing.errors import InputError

__all__ = [
    "budget_pixels",
    "decode_image",
    "load_source",
    "prepare_image",
    "smart_resize",
    "visual_tokens",
]


def smart_resize(height: int, width: int, *, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Target (height, width): both divisible by ``factor``, area within [min_pixels, max_pixels].

    Same algorithm as ``transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize``.
    """
    if height <= 0 or width <= 0:
        raise InputError("decode_error", f"image has no pixels ({width}x{height})")
    ratio = max(height, width) / min(height, width)
    if ratio > 200:
        raise InputError("bad_aspect_ratio", f"absolute aspect ratio must be smaller than 200, got {ratio}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def visual_tokens(height: int, width: int, *, patch_size: int = 14, merge_size: int = 2) -> int:
    """LLM tokens for an image already resized to multiples of patch_size*merge_size."""
    grid_h, grid_w = height // patch_size, width // patch_size
    return (grid_h * grid_w) // (merge_size * merge_size)


def budget_pixels(max_visual_tokens: int, *, patch_size: int, merge_size: int) -> int:
    """``max_pixels`` so that an image yields at most ``max_visual_tokens`` tokens.

    One token covers a (patch_size*merge_size)^2 pixel square, i.e. factor^2.
    """
    factor = patch_size * merge_size
    return max_visual_tokens * factor * factor


# --------------------------------------------------------------------------------------- loading


def _check_size(data: bytes, max_bytes: int, what: str) -> bytes:
    if len(data) == 0:
        raise InputError("empty_file", f"{what} is empty")
    if len(data) > max_bytes:
        raise InputError("too_large", f"{what} is {len(data)} bytes, limit {max_bytes}")
    return data


def _load_data_url(source: str, max_bytes: int) -> bytes:
    header, sep, payload = source.partition(",")
    if not sep or not header.lower().startswith("data:image/") or not header.lower().endswith(";base64"):
        raise InputError("unsupported_source", "only data:image/...;base64, URLs are supported")
    # base64 inflates by 4/3; refuse obviously oversized payloads before decoding.
    if len(payload) > (max_bytes * 4) // 3 + 4:
        raise InputError("too_large", f"data URL payload exceeds {max_bytes} bytes")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InputError("decode_error", f"invalid base64 in data URL: {exc}") from exc
    return _check_size(data, max_bytes, "data URL")


def _load_url(source: str, max_bytes: int, timeout_s: float) -> bytes:
    try:
        with httpx.stream("GET", source, timeout=timeout_s, follow_redirects=True) as resp:
            if resp.status_code == 404:
                raise InputError("not_found", f"{source}: HTTP 404")
            if resp.status_code >= 400:
                raise InputError("fetch_error", f"{source}: HTTP {resp.status_code}")
            declared = resp.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise InputError("too_large", f"{source}: Content-Length {declared} > limit {max_bytes}")
            buf = bytearray()
            for chunk in resp.iter_bytes():
                buf.extend(chunk)
                if len(buf) > max_bytes:
                    raise InputError("too_large", f"{source}: body exceeds limit {max_bytes}")
    except httpx.HTTPError as exc:
        raise InputError("fetch_error", f"{source}: {type(exc).__name__}: {exc}") from exc
    return _check_size(bytes(buf), max_bytes, source)


def _load_path(source: str, allowed_roots: list[Path], max_bytes: int) -> bytes:
    raw = source[len("file://") :] if source.startswith("file://") else source
    try:
        resolved = Path(raw).expanduser().resolve(strict=True)  # follows symlinks
    except FileNotFoundError as exc:
        raise InputError("not_found", f"{raw}: no such file") from exc
    except (OSError, RuntimeError) as exc:
        raise InputError("not_found", f"{raw}: {exc}") from exc
    roots = [Path(r).expanduser().resolve() for r in allowed_roots]
    if not any(resolved.is_relative_to(root) for root in roots):
        raise InputError("outside_roots", f"{raw} resolves outside the allowed roots")
    if not resolved.is_file():
        raise InputError("not_found", f"{raw}: not a regular file")
    try:
        size = resolved.stat().st_size
        if size > max_bytes:
            raise InputError("too_large", f"{raw} is {size} bytes, limit {max_bytes}")
        with resolved.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError("fetch_error", f"{raw}: {exc}") from exc
    return _check_size(data, max_bytes, raw)


def load_source(source: str, *, allowed_roots: list[Path], max_bytes: int, url_timeout_s: float) -> bytes:
    """Raw bytes for a local path (inside ``allowed_roots``), an http(s) URL, or a base64 data URL."""
    lowered = source[:16].lower()
    if lowered.startswith("data:"):
        return _load_data_url(source, max_bytes)
    if lowered.startswith(("http://", "https://")):
        return _load_url(source, max_bytes, url_timeout_s)
    if "://" in source and not lowered.startswith("file://"):
        raise InputError("unsupported_source", f"unsupported URL scheme in {source[:40]!r}")
    return _load_path(source, allowed_roots, max_bytes)


# -------------------------------------------------------------------------------------- decoding


def decode_image(
    data: bytes, *, max_pixels_guard: int = 64_000_000, draft_size: tuple[int, int] | None = None
) -> Image.Image:
    """Decode bytes to a fully loaded, EXIF-upright RGB image.

    ``max_pixels_guard`` is checked against the header size before any pixel data is decoded.
    ``draft_size`` lets JPEG decode at a reduced scale (>= that size) for speed.
    """
    if not data:
        raise InputError("empty_file", "image data is empty")
    try:
        with warnings.catch_warnings():
            # Pillow's own bomb check warns/raises based on global MAX_IMAGE_PIXELS; we do our own.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            width, height = img.size
            if width <= 0 or height <= 0:
                raise InputError("decode_error", f"image has no pixels ({width}x{height})")
            if width * height > max_pixels_guard:
                raise InputError("image_bomb", f"{width}x{height} = {width * height} pixels exceeds {max_pixels_guard}")
            if draft_size is not None and img.format == "JPEG":
                img.draft("RGB", draft_size)
            img.load()
            out = ImageOps.exif_transpose(img)
            if out.mode != "RGB":
                if out.mode in ("RGBA", "LA", "PA") or (out.mode == "P" and "transparency" in out.info):
                    rgba = out.convert("RGBA")
                    background = Image.new("RGB", rgba.size, (255, 255, 255))
                    background.paste(rgba, mask=rgba.getchannel("A"))
                    out = background
                else:
                    out = out.convert("RGB")
            out.load()
    except InputError:
        raise
    except Image.DecompressionBombError as exc:
        raise InputError("image_bomb", str(exc)) from exc
    except UnidentifiedImageError as exc:
        raise InputError("decode_error", f"not a recognised image: {exc}") from exc
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise InputError("decode_error", f"{type(exc).__name__}: {exc}") from exc
    return out


def prepare_image(img: Image.Image, *, factor: int, min_pixels: int, max_pixels: int) -> Image.Image:
    """Resize to the smart_resize target (BICUBIC), cheaply pre-shrinking very large images first."""
    width, height = img.size
    target_h, target_w = smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    if (target_w, target_h) == (width, height):
        return img
    # Integer box-reduce first when the source is at least 4x larger on both axes; keeps >= 2x headroom
    # so the final BICUBIC pass still sees enough detail.
    scale = min(width // target_w, height // target_h) // 2
    if scale >= 2:
        img = img.reduce(scale)
    return img.resize((target_w, target_h), Image.Resampling.BICUBIC)
