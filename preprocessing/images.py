"""Image loading, decoding and Qwen-VL style resizing (pure functions: Pillow, and libvips for JPEGs when
installed, see ``preprocessing.vips``; HEIF, JPEG XL and camera RAW files through ``preprocessing.formats``;
URLs are fetched by ``preprocessing.fetch``, files read by ``preprocessing.paths``)."""

from __future__ import annotations

import base64
import binascii
import io
import math
import struct
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError
from PIL.JpegImagePlugin import JpegImageFile

from preprocessing import formats, vips
from preprocessing.colour import to_srgb
from preprocessing.fetch import UrlPolicy, fetch_url, redact
from preprocessing.formats import heif
from preprocessing.input_errors import InputError
from preprocessing.paths import confined_path, read_regular_file
from preprocessing.photo_facts import photo_facts
from vlbatch.errors import DECODE_MEMORY
from vlbatch.paths import is_local, local_path

__all__ = [
    "budget_pixels",
    "dct_scale_for",
    "decode_for_budget",
    "decode_image",
    "load_source",
    "prepare_image",
    "smart_resize",
    "upright_size",
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


def _load_path(source: str, allowed_roots: list[Path], max_bytes: int) -> bytes:
    raw = local_path(source)
    path = confined_path(raw, allowed_roots)
    return _check_size(read_regular_file(path, max_bytes=max_bytes, roots=allowed_roots), max_bytes, raw)


def load_source(
    source: str,
    *,
    allowed_roots: list[Path],
    max_bytes: int,
    url_timeout_s: float,
    url_policy: UrlPolicy | None = None,
    allowed_s3_prefixes: Sequence[str] = (),
) -> bytes:
    """Raw bytes for a local path (a regular file inside ``allowed_roots``), an http(s) URL (public addresses
    only unless ``url_policy`` allows more, see ``preprocessing.fetch``), an ``s3://`` object under one of
    ``allowed_s3_prefixes`` (``preprocessing.object_store``), or a base64 data URL."""
    lowered = source[:16].lower()
    if lowered.startswith("data:"):
        return _load_data_url(source, max_bytes)
    if lowered.startswith("s3://"):
        from preprocessing.object_store import read_object  # boto3 only for jobs that name object storage

        return _check_size(read_object(source, allowed=allowed_s3_prefixes, max_bytes=max_bytes), max_bytes, source)
    if lowered.startswith(("http://", "https://")):
        data = fetch_url(source, policy=url_policy or UrlPolicy(), max_bytes=max_bytes, timeout_s=url_timeout_s)
        return _check_size(data, max_bytes, redact(source))
    if not is_local(source):
        raise InputError("unsupported_source", f"unsupported URL scheme in {redact(source)[:60]!r}")
    return _load_path(source, allowed_roots, max_bytes)


# -------------------------------------------------------------------------------------- decoding

_ORIENTATION_TAG = 0x0112
# EXIF orientation -> the transpose that makes the image upright (same table as ImageOps.exif_transpose).
_UPRIGHT: dict[int, Image.Transpose] = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
# Metadata that can carry an orientation; dropped once the pixels are upright so nothing rotates twice.
_ORIENTATION_INFO_KEYS = ("exif", "Raw profile type exif", "XML:com.adobe.xmp", "xmp")
# Modes Pillow resamples correctly as they are, so conversion to RGB can wait for the smaller image.
# Alpha modes are premultiplied inside Image.resize, so compositing on white afterwards is equivalent.
_RESAMPLE_NATIVE = frozenset({"RGB", "L", "CMYK", "RGBA", "LA"})
_SIXTEEN_BIT_GREY = frozenset({"I;16", "I;16B", "I;16L", "I;16N"})
# After DCT scaling a JPEG's final pass shrinks by less than 2x. BICUBIC stays at ~52 dB (photo) / ~41 dB
# (rendered text) PSNR from a full-resolution BICUBIC resize, what the model's own processor does; HAMMING,
# BILINEAR and BOX cost less but blur small text (31/30/23 dB), see benchmarks/preprocess_images.py.
_RESAMPLE = Image.Resampling.BICUBIC
_DCT_SCALES = (8, 4, 2, 1)


# Formats a photo library holds that Pillow decodes by itself (JPEG covers MPO, whose first image is the
# primary one: motion photos and Ultra HDR JPEGs too). HEIF joins through its plugin, JPEG XL and RAW take
# ``preprocessing.formats``. Anything else Pillow recognises (EPS, which would run Ghostscript on untrusted
# bytes; WMF; formats whose codec is not built in) is refused as unsupported_format rather than tried.
DECODED_FORMATS = (
    "JPEG", "PNG", "GIF", "WEBP", "AVIF", "TIFF", "BMP", "DIB", "PPM", "TGA", "ICO", "JPEG2000", "PSD",
)  # fmt: skip
# Pillow's words for "I know this format but have no decoder for it here".
_NO_DECODER = ("not available", "cannot find loader", "ghostscript", "unsupported")
_CONVERT = "convert it to JPEG, PNG, WebP, AVIF or HEIC"


@contextmanager
def _decode_errors() -> Iterator[None]:
    """Map Pillow's failure modes onto stable InputError codes."""
    try:
        yield
    except InputError:
        raise
    except Image.DecompressionBombError as exc:
        raise InputError("image_bomb", str(exc)) from exc
    except UnidentifiedImageError as exc:
        # Pillow's message names only its in-memory buffer object ("<_io.BytesIO object at 0x...>").
        raise InputError("decode_error", "not a recognised image format") from exc
    except MemoryError as exc:  # the bytes may be fine: the decode needs more than this process may take
        raise InputError(DECODE_MEMORY, f"decoding needs more memory than this process may take: {exc}") from exc
    except (OSError, ValueError, SyntaxError, EOFError, struct.error, UserWarning, RuntimeError) as exc:
        # RuntimeError: what the codec libraries raise for a stream they cannot decode (libjxl's JpegxlError,
        # libheif's decoder plugins), with the library's own message; NotImplementedError is a feature it lacks.
        unsupported = isinstance(exc, NotImplementedError) or any(w in str(exc).lower() for w in _NO_DECODER)
        code = "unsupported_format" if unsupported else "decode_error"
        raise InputError(code, f"{type(exc).__name__}: {exc}") from exc


def _unsupported_kind(data: bytes) -> str | None:
    """The name of a format vlbatch does not decode, sniffed from the bytes Pillow could not open with the
    formats it is allowed; None when the bytes are no known image at all."""
    head = data[:1024].lstrip()
    if head[:5].lower() == b"<?xml" or head[:4].lower() == b"<svg" or b"<svg" in head.lower():
        return "SVG"
    if formats.sniff(data) == "heif":  # libheif read nothing of it: a damaged file, unless it is missing
        return None if heif.register() else "HEIF/HEIC (pillow-heif is not installed)"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fmt = Image.open(io.BytesIO(data)).format  # header only: no plugin decodes pixels here
    except Exception:
        return None
    return fmt or None


def _open_checked(data: bytes, max_pixels_guard: int) -> Image.Image:
    """Open (header only) and refuse empty, zero-size and oversized images before any pixel is decoded."""
    if not data:
        raise InputError("empty_file", "image data is empty")
    allowed: tuple[str, ...] = DECODED_FORMATS
    if formats.sniff(data) == "heif" and heif.register():
        allowed = (*DECODED_FORMATS, heif.FORMAT)
    with warnings.catch_warnings():
        # Pillow's own bomb check warns/raises based on global MAX_IMAGE_PIXELS; we do our own. A damaged
        # EXIF block warns too (JPEG reads its resolution from it): viewers ignore it, and so do we.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        warnings.simplefilter("ignore", UserWarning)
        try:
            img = Image.open(io.BytesIO(data), formats=allowed)
        except UnidentifiedImageError:
            kind = _unsupported_kind(data)
            if kind is None:
                raise
            raise InputError("unsupported_format", f"{kind} images are not decoded; {_CONVERT}") from None
    _check_pixels(img.size, max_pixels_guard)
    return img


def _check_pixels(size: tuple[int, int], max_pixels_guard: int) -> None:
    width, height = size
    if width <= 0 or height <= 0:
        raise InputError("decode_error", f"image has no pixels ({width}x{height})")
    if width * height > max_pixels_guard:
        raise InputError("image_bomb", f"{width}x{height} = {width * height} pixels exceeds {max_pixels_guard}")


def _open_special(data: bytes, max_pixels_guard: int) -> formats.Special | None:
    """A JPEG XL or RAW file opened by its own module (header only, size checked); None for Pillow's files."""
    kind = formats.sniff(data)
    if kind == "jxl":
        from preprocessing.formats.jxl import open_jxl

        special = open_jxl(data)
    elif kind == "raw":
        from preprocessing.formats.raw import open_raw

        special = open_raw(data, max_pixels_guard)
    else:
        return None
    _check_pixels(special.size, max_pixels_guard)
    return special


def _exif_of(img: Image.Image) -> Image.Exif:
    """The image's EXIF (Pillow keeps it for later calls); an empty one when the block is damaged, which
    viewers ignore too. For PNG this may decode the file to find eXIf."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Corrupt EXIF data": the pixels are fine
        try:
            return img.getexif()
        except (SyntaxError, ValueError, struct.error, EOFError, KeyError, TypeError, UserWarning):
            return Image.Exif()


def _orientation(img: Image.Image) -> int:
    """EXIF orientation 1-8 (1 when absent or invalid)."""
    value = _exif_of(img).get(_ORIENTATION_TAG, 1)
    return value if value in _UPRIGHT else 1


def upright_size(width: int, height: int, orientation: int) -> tuple[int, int]:
    """(width, height) once EXIF ``orientation`` is applied: 5-8 are quarter turns and swap the axes."""
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def dct_scale_for(src_w: int, src_h: int, target_w: int, target_h: int) -> int:
    """Largest JPEG DCT reduction in {1, 2, 4, 8} whose output still covers the target on both axes.

    "Covers" means the exact scaled extent ``src / s`` is at least the target, i.e. ``s * target <= src``,
    so the final resize never upsamples. Pillow's ``JpegImageFile.draft(mode, (target_w, target_h))``
    picks the same scale.
    """
    if min(src_w, src_h, target_w, target_h) <= 0:
        raise ValueError(f"sizes must be positive: {src_w}x{src_h} -> {target_w}x{target_h}")
    for scale in _DCT_SCALES:
        if scale * target_w <= src_w and scale * target_h <= src_h:
            return scale
    return 1


def _reduce_factor(src_w: int, src_h: int, target_w: int, target_h: int) -> int:
    """Integer box-reduce to apply before the final resize (1 = none).

    Only when the source is at least 4x larger on both axes; keeps >= 2x headroom so the final BICUBIC
    pass still sees enough detail.
    """
    scale = min(src_w // target_w, src_h // target_h) // 2
    return scale if scale >= 2 else 1


def _to_rgb(img: Image.Image) -> Image.Image:
    """RGB, with any alpha composited on white; returns ``img`` itself when it is RGB already."""
    if img.mode == "RGB":
        return img
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img if img.mode == "RGBA" else img.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    if img.mode in _SIXTEEN_BIT_GREY:
        # A plain convert clips every value above 255 to white; keep the top 8 bits instead.
        img = img.convert("I").point(lambda v: v * (1 / 256)).convert("L")
    return img.convert("RGB")


def _resample_ready(img: Image.Image) -> Image.Image:
    """A mode Image.resize treats as continuous tone (palette and "1" resample NEAREST; 16-bit gets scaled)."""
    if img.mode in _RESAMPLE_NATIVE:
        return img
    if img.mode == "PA" or (img.mode == "P" and "transparency" in img.info):
        return img.convert("RGBA")
    return _to_rgb(img)


def decode_for_budget(
    data: bytes, *, factor: int, min_pixels: int, max_pixels: int, max_pixels_guard: int = 64_000_000
) -> Image.Image:
    """Decode straight to the model-ready RGB image: EXIF-upright, exactly the ``smart_resize`` size.

    The target comes from the header size (axes swapped for EXIF orientations 5-8), so it equals
    ``smart_resize`` of the upright original and the token count matches the model's processor. JPEGs are
    decoded at the smallest DCT scale still covering the target, then resized once (by libvips when it is
    installed, else Pillow); rotation, the colour profile and the conversion to RGB happen on the small
    image. HEIF, JPEG XL and RAW files decode through ``preprocessing.formats``. The photo's facts from its
    header (``preprocessing.photo_facts``, GPS included) ride along in the result's ``info["photo"]``.
    """
    with _decode_errors():
        special = _open_special(data, max_pixels_guard)
        if special is not None:
            return _decode_special(special, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
        img = _open_checked(data, max_pixels_guard)
        orientation = _orientation(img)
        up_w, up_h = upright_size(*img.size, orientation)
        # HEIF's plugin has applied the file's own rotation already and reports 1; the facts keep the original.
        facts = photo_facts(
            _exif_of(img), size=(up_w, up_h), orientation=img.info.get("original_orientation") or orientation
        )
        icc = img.info.get("icc_profile")
        target_h, target_w = smart_resize(up_h, up_w, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
        # Resize in the stored orientation; the transpose afterwards turns it into (target_w, target_h).
        stored_target = upright_size(target_w, target_h, orientation)
        src_w, src_h = img.size
        if isinstance(img, JpegImageFile) and img.mode in ("RGB", "L"):
            scale = dct_scale_for(src_w, src_h, *stored_target)
            try:
                fast = vips.decode_jpeg_resized(data, shrink=scale, size=stored_target)
            except InputError:
                # libjpeg-turbo or libvips stopped at damage; Pillow's decoder has the last word (it shows a
                # JPEG whose end marker is missing, and refuses one whose rows are).
                fast = None
            if fast is not None:
                return _finish(fast.transpose(_UPRIGHT[orientation]) if orientation != 1 else fast, icc, facts)
        # Source region to resample: after DCT scaling the image is ceil(src / s) pixels, of which exactly
        # src / s correspond to the original; resampling that box keeps the geometry exact.
        box: tuple[float, float, float, float] = (0, 0, src_w, src_h)
        if isinstance(img, JpegImageFile) and dct_scale_for(src_w, src_h, *stored_target) > 1:
            drafted = img.draft("RGB", stored_target)  # keeps L and CMYK as they are
            if drafted is not None:
                box = drafted[1]
        img.load()
        img = _resample_ready(img)
        if img.size != stored_target or box != (0, 0, *img.size):
            cur_w, cur_h = box[2] - box[0], box[3] - box[1]
            reduce_by = _reduce_factor(int(cur_w), int(cur_h), *stored_target)
            if reduce_by > 1:
                img = img.reduce(reduce_by)
                box = (box[0] / reduce_by, box[1] / reduce_by, box[2] / reduce_by, box[3] / reduce_by)
            img = img.resize(stored_target, _RESAMPLE, box=box)
        if orientation != 1:
            img = img.transpose(_UPRIGHT[orientation])
            for key in _ORIENTATION_INFO_KEYS:
                img.info.pop(key, None)
        return _finish(img, icc, facts)


def _decode_special(special: formats.Special, *, factor: int, min_pixels: int, max_pixels: int) -> Image.Image:
    """A JPEG XL or RAW file's upright pixels at exactly the ``smart_resize`` size of its upright header size."""
    width, height = special.size
    target_h, target_w = smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    img = special.load((target_w, target_h))
    icc = img.info.get("icc_profile")
    img = _resample_ready(img)
    if img.size != (target_w, target_h):
        reduce_by = _reduce_factor(*img.size, target_w, target_h)
        if reduce_by > 1:
            img = img.reduce(reduce_by)
        img = img.resize((target_w, target_h), _RESAMPLE)
    facts = photo_facts(special.exif, size=special.size, orientation=special.orientation, taken_at=special.taken_at)
    return _finish(img, icc, facts)


def _finish(img: Image.Image, icc: bytes | None, facts: dict[str, object]) -> Image.Image:
    """The model-ready image: 8-bit RGB in sRGB (the ICC profile applied on the small image), carrying the
    photo's facts in ``info["photo"]``."""
    if img.mode == "CMYK":
        img = to_srgb(img, icc)  # a CMYK profile makes RGB; without one Pillow's plain conversion follows
    img = to_srgb(_to_rgb(img), icc)
    img.info = {"photo": facts}
    return img


def decode_rgb_bytes(
    data: bytes, *, factor: int, min_pixels: int, max_pixels: int, max_pixels_guard: int = 64_000_000
) -> tuple[tuple[int, int], bytes, dict[str, object]]:
    """``decode_for_budget`` as plain values, (size, RGB bytes, the photo's facts): what a decoder child
    process sends back."""
    img = decode_for_budget(
        data, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels, max_pixels_guard=max_pixels_guard
    )
    return img.size, img.tobytes(), img.info.get("photo", {})


def checked_format(data: bytes, *, max_pixels_guard: int = 64_000_000) -> str:
    """Pillow's name of the image's format, after the same header checks as a decode (a format we decode, not
    empty, not over ``max_pixels_guard``); no pixel is decoded. For a file of Pillow's (``formats.sniff`` None)."""
    with _decode_errors():
        return str(_open_checked(data, max_pixels_guard).format)


def upright_header_size(data: bytes, *, max_pixels_guard: int = 64_000_000) -> tuple[int, int]:
    """The image's upright (width, height) from its header, after the same checks as a decode; no pixel is decoded."""
    with _decode_errors():
        special = _open_special(data, max_pixels_guard)
        if special is not None:
            return special.size
        img = _open_checked(data, max_pixels_guard)
        return upright_size(*img.size, _orientation(img))


def decode_image(
    data: bytes, *, max_pixels_guard: int = 64_000_000, draft_size: tuple[int, int] | None = None
) -> Image.Image:
    """Decode bytes to a fully loaded, EXIF-upright RGB image.

    ``max_pixels_guard`` is checked against the header size before any pixel data is decoded.
    ``draft_size`` lets JPEG decode at a reduced scale (>= that size) for speed.
    """
    with _decode_errors():
        special = _open_special(data, max_pixels_guard)
        if special is not None:  # JPEG XL, RAW: upright already; a RAW's preview when it covers the draft box
            width, height = special.size
            fit = min(1.0, *(box / side for box, side in zip(draft_size or special.size, special.size, strict=True)))
            return _to_rgb(special.load((max(1, int(width * fit)), max(1, int(height * fit)))))
        img = _open_checked(data, max_pixels_guard)
        if draft_size is not None and img.format == "JPEG":
            img.draft("RGB", draft_size)
        img.load()
        # In place: the returning variant copies the whole image even when there is nothing to rotate.
        ImageOps.exif_transpose(img, in_place=True)
        return _to_rgb(img)


def prepare_image(img: Image.Image, *, factor: int, min_pixels: int, max_pixels: int) -> Image.Image:
    """Resize to the smart_resize target (BICUBIC), cheaply pre-shrinking very large images first."""
    width, height = img.size
    target_h, target_w = smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    if (target_w, target_h) == (width, height):
        return img
    scale = _reduce_factor(width, height, target_w, target_h)
    if scale > 1:
        img = img.reduce(scale)
    return img.resize((target_w, target_h), Image.Resampling.BICUBIC)
