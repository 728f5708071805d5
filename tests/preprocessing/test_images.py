"""Tests for preprocessing.images: smart_resize parity with transformers, decoding errors, sources."""

from __future__ import annotations

import base64
import http.server
import io
import itertools
import logging
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageChops, ImageStat
from PIL.JpegImagePlugin import JpegImageFile

from preprocessing import turbo, vips
from preprocessing.addresses import AddressPolicy
from preprocessing.fetch import UrlPolicy
from preprocessing.images import (
    budget_pixels,
    dct_scale_for,
    decode_for_budget,
    decode_image,
    load_source,
    prepare_image,
    smart_resize,
    upright_size,
    visual_tokens,
)
from preprocessing.input_errors import InputError

MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 1280


def _png_bytes(size: tuple[int, int] = (40, 30), color: tuple[int, int, int] = (200, 10, 10)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def _jpeg_bytes(img: Image.Image, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90, **kwargs)
    return buf.getvalue()


@pytest.fixture(params=["pillow", "libvips", "turbo"])
def jpeg_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a JPEG test on each decode path: Pillow's; libvips' shrink-on-load decode and resize; and
    libjpeg-turbo's eighth-scale decode (simplejpeg) resized by libvips, when those are installed."""
    if request.param == "pillow":
        monkeypatch.setattr(vips, "_vips", lambda: None)
    elif not vips.available():
        pytest.skip("pyvips or libvips not importable")
    elif request.param == "libvips":
        monkeypatch.setattr(turbo, "_simplejpeg", lambda: None)
    elif not turbo.available():
        pytest.skip("simplejpeg not importable")
    return str(request.param)


# ------------------------------------------------------------------------------------ smart_resize

SIZES = sorted(
    set(itertools.product([1, 3, 27, 28, 29, 55, 100, 224, 333, 480, 719, 1080, 1999, 4032], repeat=2))
    | {(8000, 6000), (6000, 8000), (28, 5000), (10, 1999), (3024, 4032)}
)
SIZES = [(h, w) for h, w in SIZES if max(h, w) / min(h, w) <= 200]


@pytest.mark.parametrize("factor", [28, 32])
@pytest.mark.parametrize(("min_pixels", "max_pixels"), [(MIN_PIXELS, MAX_PIXELS), (4 * 28 * 28, 256 * 28 * 28)])
def test_smart_resize_matches_transformers(factor: int, min_pixels: int, max_pixels: int) -> None:
    qwen = pytest.importorskip(
        "transformers.models.qwen2_vl.image_processing_qwen2_vl", reason="transformers not importable"
    )
    assert len(SIZES) > 150
    for h, w in SIZES:
        expected = qwen.smart_resize(h, w, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
        got = smart_resize(h, w, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
        assert got == tuple(expected), (h, w)
        assert got[0] % factor == 0 and got[1] % factor == 0


def test_smart_resize_aspect_ratio_error() -> None:
    with pytest.raises(InputError) as ei:
        smart_resize(10, 2011, factor=28, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    assert ei.value.code == "bad_aspect_ratio"
    smart_resize(10, 2000, factor=28, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)  # exactly 200 is fine


def test_smart_resize_known_values() -> None:
    # 1080p at default Qwen2-VL limits: 1092x1932 exceeds max_pixels, so it is floored after scaling.
    assert smart_resize(1080, 1920, factor=28, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS) == (728, 1316)
    assert smart_resize(10, 10, factor=28, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS) == (56, 56)


def test_budget_and_visual_tokens() -> None:
    assert budget_pixels(1280, patch_size=14, merge_size=2) == MAX_PIXELS
    assert budget_pixels(256, patch_size=16, merge_size=2) == 256 * 32 * 32
    assert visual_tokens(756, 1344) == (756 // 28) * (1344 // 28)
    assert visual_tokens(64, 96, patch_size=16, merge_size=2) == 2 * 3
    for tokens in (64, 256, 1280):
        for h, w in [(1080, 1920), (4032, 3024), (333, 5000)]:
            for patch in (14, 16):
                mp = budget_pixels(tokens, patch_size=patch, merge_size=2)
                rh, rw = smart_resize(h, w, factor=patch * 2, min_pixels=4 * (patch * 2) ** 2, max_pixels=mp)
                assert visual_tokens(rh, rw, patch_size=patch, merge_size=2) <= tokens


def _qwen_processor(min_pixels: int, max_pixels: int):  # type: ignore[no-untyped-def]
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

        return Qwen2VLImageProcessor(patch_size=14, merge_size=2, min_pixels=min_pixels, max_pixels=max_pixels)
    except ImportError:
        pass
    try:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    except ImportError as exc:
        pytest.skip(f"no Qwen2-VL image processor importable: {exc}")
    return Qwen2VLImageProcessorPil(patch_size=14, merge_size=2, min_pixels=min_pixels, max_pixels=max_pixels)


@pytest.mark.parametrize("size", [(640, 480), (1920, 1080), (123, 457), (50, 50), (3000, 400)])
def test_token_count_matches_qwen2vl_processor(size: tuple[int, int], jpeg_backend: str) -> None:
    pytest.importorskip("transformers", reason="transformers not importable")
    min_pixels, max_pixels = MIN_PIXELS, budget_pixels(512, patch_size=14, merge_size=2)
    proc = _qwen_processor(min_pixels, max_pixels)
    data = _jpeg_bytes(Image.effect_noise(size, 64).convert("RGB"))
    img = decode_image(data)
    out = proc(images=[img], return_tensors="np")
    t, gh, gw = (int(x) for x in out["image_grid_thw"][0])
    assert t == 1
    prepared = prepare_image(img, factor=28, min_pixels=min_pixels, max_pixels=max_pixels)
    pw, ph = prepared.size
    assert (gh * 14, gw * 14) == (ph, pw)
    assert visual_tokens(ph, pw, patch_size=14, merge_size=2) == gh * gw // 4
    assert visual_tokens(ph, pw) <= 512
    direct = decode_for_budget(data, factor=28, min_pixels=min_pixels, max_pixels=max_pixels)
    assert direct.size == prepared.size and direct.mode == "RGB"


@pytest.mark.parametrize("orientation", [1, 6, 8])
def test_decode_for_budget_token_count_matches_qwen2vl_processor_on_upright_image(
    orientation: int, jpeg_backend: str
) -> None:
    pytest.importorskip("transformers", reason="transformers not importable")
    min_pixels, max_pixels = MIN_PIXELS, budget_pixels(256, patch_size=14, merge_size=2)
    proc = _qwen_processor(min_pixels, max_pixels)
    data = _jpeg_bytes(Image.effect_noise((1500, 700), 64).convert("RGB"), exif=_exif(orientation))
    upright = decode_image(data)  # what a caller without our budget logic would hand the processor
    t, gh, gw = (int(x) for x in proc(images=[upright], return_tensors="np")["image_grid_thw"][0])
    assert t == 1
    out = decode_for_budget(data, factor=28, min_pixels=min_pixels, max_pixels=max_pixels)
    assert out.size == (gw * 14, gh * 14)
    assert visual_tokens(out.height, out.width) == gh * gw // 4 <= 256


def test_prepare_image_large_downscale_uses_reduce_and_hits_target() -> None:
    img = Image.new("RGB", (4000, 3000), (1, 2, 3))
    out = prepare_image(
        img, factor=28, min_pixels=MIN_PIXELS, max_pixels=budget_pixels(64, patch_size=14, merge_size=2)
    )
    assert out.size[::-1] == smart_resize(3000, 4000, factor=28, min_pixels=MIN_PIXELS, max_pixels=64 * 784)
    assert out.mode == "RGB"
    assert out.getpixel((5, 5)) == (1, 2, 3)


# ---------------------------------------------------------------------------------------- decoding


def test_decode_ok_and_rgb_conversion() -> None:
    img = decode_image(_png_bytes((40, 30)))
    assert img.size == (40, 30) and img.mode == "RGB"
    buf = io.BytesIO()
    Image.new("RGBA", (8, 8), (0, 0, 0, 0)).save(buf, format="PNG")
    rgba = decode_image(buf.getvalue())
    assert rgba.mode == "RGB" and rgba.getpixel((0, 0)) == (255, 255, 255)
    buf = io.BytesIO()
    Image.new("L", (8, 8), 77).save(buf, format="PNG")
    assert decode_image(buf.getvalue()).getpixel((1, 1)) == (77, 77, 77)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "empty_file"),
        (b"this is not an image at all", "decode_error"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, "decode_error"),
    ],
)
def test_decode_bad_bytes(data: bytes, code: str) -> None:
    with pytest.raises(InputError) as ei:
        decode_image(data)
    assert ei.value.code == code


def test_decode_truncated_jpeg_and_png() -> None:
    jpeg = _jpeg_bytes(Image.effect_noise((300, 200), 64).convert("RGB"))
    png = _png_bytes((300, 200))
    for data in (jpeg[: len(jpeg) // 2], png[: len(png) // 2]):
        with pytest.raises(InputError) as ei:
            decode_image(data)
        assert ei.value.code == "decode_error"


def _bomb_png(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims width x height."""
    raw = _png_bytes((1, 1))
    ihdr_data = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr_data
    ihdr = struct.pack(">I", len(ihdr_data)) + chunk + struct.pack(">I", zlib.crc32(chunk) & 0xFFFFFFFF)
    return raw[:8] + ihdr + raw[8 + 25 :]


def test_decode_bomb_guard() -> None:
    with pytest.raises(InputError) as ei:
        decode_image(_bomb_png(10_000, 10_000))
    assert ei.value.code == "image_bomb"
    with pytest.raises(InputError) as ei:
        decode_image(_png_bytes((100, 100)), max_pixels_guard=9_999)
    assert ei.value.code == "image_bomb"
    # Beyond Pillow's own hard limit too, still our code, and global state untouched.
    before = Image.MAX_IMAGE_PIXELS
    with pytest.raises(InputError) as ei:
        decode_image(_bomb_png(60_000, 60_000))
    assert ei.value.code == "image_bomb"
    assert before == Image.MAX_IMAGE_PIXELS


def test_exif_orientation_is_applied() -> None:
    # Stored landscape 60x20 with left half red; Orientation=6 means "rotate 90 CW to display".
    img = Image.new("RGB", (60, 20), (0, 0, 255))
    img.paste((255, 0, 0), (0, 0, 30, 20))
    exif = Image.Exif()
    exif[0x0112] = 6
    out = decode_image(_jpeg_bytes(img, exif=exif.tobytes()))
    assert out.size == (20, 60)
    r, _, b = out.getpixel((10, 5))  # after 90 CW, the stored left half becomes the top
    assert r > 200 and b < 60
    r, _, b = out.getpixel((10, 55))
    assert b > 200 and r < 60


def test_decode_16bit_grey_png_keeps_top_byte() -> None:
    img = Image.new("I;16", (20, 10), 40000)
    img.paste(Image.new("I;16", (10, 10), 1000), (10, 0))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    out = decode_image(buf.getvalue())
    # A plain convert would clip both halves to white.
    assert out.getpixel((2, 2)) == (156, 156, 156)
    assert out.getpixel((15, 2)) == (3, 3, 3)


def test_draft_size_reduces_jpeg_decode() -> None:
    data = _jpeg_bytes(Image.effect_noise((800, 600), 64).convert("RGB"))
    out = decode_image(data, draft_size=(200, 150))
    assert out.mode == "RGB"
    assert 200 <= out.size[0] < 800 and 150 <= out.size[1] < 600


# ------------------------------------------------------------------------------- decode_for_budget

BUDGET_256 = {"factor": 28, "min_pixels": MIN_PIXELS, "max_pixels": budget_pixels(256, patch_size=14, merge_size=2)}


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def _target(width: int, height: int, orientation: int = 1, **budget: int) -> tuple[int, int]:
    """Expected output (width, height): smart_resize of the EXIF-upright size."""
    up_w, up_h = upright_size(width, height, orientation)
    h, w = smart_resize(up_h, up_w, **(budget or BUDGET_256))
    return w, h


def _mean_abs_diff(a: Image.Image, b: Image.Image) -> float:
    assert a.size == b.size
    return sum(ImageStat.Stat(ImageChops.difference(a.convert("RGB"), b.convert("RGB"))).mean) / 3


def _quadrants(size: tuple[int, int]) -> Image.Image:
    """Four flat colours: any wrong rotation, flip or channel order shows up in the pixels."""
    w, h = size
    img = Image.new("RGB", size, (220, 30, 30))
    img.paste((30, 200, 30), (w // 2, 0, w, h // 2))
    img.paste((30, 30, 220), (0, h // 2, w // 2, h))
    img.paste((230, 230, 40), (w // 2, h // 2, w, h))
    return img


@pytest.mark.parametrize(
    ("src", "target", "scale"),
    [
        ((4000, 3000), (1008, 756), 2),  # 1/4 would give 1000x750 < target
        ((4032, 3024), (1008, 756), 4),  # exactly 4x on both axes
        ((4031, 3024), (1008, 756), 2),
        ((4032, 3023), (1008, 756), 2),
        ((8064, 6048), (1008, 756), 8),
        ((20000, 15000), (1008, 756), 8),  # 8 is the largest DCT reduction
        ((2016, 1512), (1008, 756), 2),
        ((2015, 1512), (1008, 756), 1),
        ((1000, 750), (1008, 756), 1),  # upscale
        ((4032, 1512), (1008, 756), 2),  # the tighter axis decides
        ((28, 28), (28, 28), 1),
    ],
)
def test_dct_scale_for_boundaries(src: tuple[int, int], target: tuple[int, int], scale: int) -> None:
    assert dct_scale_for(*src, *target) == scale


def test_dct_scale_for_rejects_empty_sizes() -> None:
    with pytest.raises(ValueError):
        dct_scale_for(100, 100, 0, 10)


@pytest.mark.parametrize(("src", "target"), [((400, 300), (100, 75)), ((400, 300), (101, 75)), ((403, 301), (50, 37))])
def test_dct_scale_for_agrees_with_pillow_draft(src: tuple[int, int], target: tuple[int, int]) -> None:
    img = Image.open(io.BytesIO(_jpeg_bytes(Image.new("RGB", src, (9, 9, 9)))))
    img.draft("RGB", target)
    s = dct_scale_for(*src, *target)
    assert img.size == (-(-src[0] // s), -(-src[1] // s))
    assert img.size[0] >= target[0] and img.size[1] >= target[1]


def _spy_scales(monkeypatch: pytest.MonkeyPatch, backend: str) -> list[tuple[int, int]]:
    """Records the decoded size of every JPEG decode_for_budget makes, on either resize path."""
    sizes: list[tuple[int, int]] = []
    if backend == "turbo":
        real_turbo = turbo.decode_scaled

        def spy_turbo(data: bytes, *, shrink: int) -> Any:
            result = real_turbo(data, shrink=shrink)
            assert result is not None, "libjpeg-turbo fell back"
            sizes.append((result.shape[1], result.shape[0]))
            return result

        monkeypatch.setattr(turbo, "decode_scaled", spy_turbo)
        return sizes
    if backend == "libvips":
        real_vips = vips.decode_jpeg_resized

        def spy_vips(data: bytes, *, shrink: int, size: tuple[int, int]) -> Image.Image | None:
            w, h = Image.open(io.BytesIO(data)).size
            sizes.append((-(-w // shrink), -(-h // shrink)))
            result = real_vips(data, shrink=shrink, size=size)
            assert result is not None, "libvips fell back to Pillow"
            return result

        monkeypatch.setattr(vips, "decode_jpeg_resized", spy_vips)
        return sizes
    real_draft = JpegImageFile.draft

    def spy(
        self: JpegImageFile, mode: str | None, size: tuple[int, int] | None
    ) -> tuple[str, tuple[int, int, float, float]] | None:
        result = real_draft(self, mode, size)
        sizes.append(self.size)
        return result

    monkeypatch.setattr(JpegImageFile, "draft", spy)
    return sizes


def test_decode_for_budget_12mp_uses_smallest_covering_dct_scale(
    monkeypatch: pytest.MonkeyPatch, jpeg_backend: str
) -> None:
    sizes = _spy_scales(monkeypatch, jpeg_backend)
    budget = {"factor": 28, "min_pixels": MIN_PIXELS, "max_pixels": budget_pixels(1024, patch_size=14, merge_size=2)}
    out = decode_for_budget(_jpeg_bytes(_quadrants((4000, 3000))), **budget)
    assert out.size == (1008, 756) == _target(4000, 3000, **budget)
    assert sizes == [(2000, 1500)]  # 1/2 is the covering scale (1/4 would give 1000x750)
    reference = prepare_image(decode_image(_jpeg_bytes(_quadrants((4000, 3000)))), **budget)
    assert _mean_abs_diff(out, reference) < 2.0


def test_decode_for_budget_drafts_mpo_too(monkeypatch: pytest.MonkeyPatch, jpeg_backend: str) -> None:
    # Phone cameras write multi-picture JPEGs; Pillow opens them as MPO, a JpegImageFile subclass.
    sizes = _spy_scales(monkeypatch, jpeg_backend)
    img = _quadrants((1600, 1000))
    buf = io.BytesIO()
    img.save(buf, format="MPO", save_all=True, append_images=[img.copy()])
    assert Image.open(io.BytesIO(buf.getvalue())).format == "MPO"
    out = decode_for_budget(buf.getvalue(), **BUDGET_256)
    assert out.size == _target(1600, 1000)
    assert sizes == [(800, 500)]
    assert _mean_abs_diff(out, prepare_image(decode_image(buf.getvalue()), **BUDGET_256)) < 2.0


@pytest.mark.parametrize("src", [(4000, 3000), (3001, 4003), (1999, 999), (641, 479), (28, 3000)])
@pytest.mark.parametrize("tokens", [64, 256, 1024])
def test_libvips_resize_lands_exactly_on_the_grid(src: tuple[int, int], tokens: int) -> None:
    # The resize scale is a float ratio: the output must still be exactly the grid, or the token count drifts.
    if not vips.available():
        pytest.skip("pyvips or libvips not importable")
    budget = {"factor": 28, "min_pixels": MIN_PIXELS, "max_pixels": budget_pixels(tokens, patch_size=14, merge_size=2)}
    target = _target(*src, **budget)
    data = _jpeg_bytes(Image.new("RGB", src, (90, 120, 150)))
    out = vips.decode_jpeg_resized(data, shrink=dct_scale_for(*src, *target), size=target)
    assert out is not None and out.size == target and out.mode == "RGB"
    assert out.getpixel((out.width // 2, out.height // 2)) == pytest.approx((90, 120, 150), abs=2)


def test_libvips_path_logs_nothing_per_image(caplog: pytest.LogCaptureFixture) -> None:
    # libvips reports every finished thread pool; at the worker's INFO level that was two log lines per item.
    if not vips.available():
        pytest.skip("pyvips or libvips not importable")
    data = _jpeg_bytes(_quadrants((1600, 1200)))
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            decode_for_budget(data, **BUDGET_256)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("pyvips")] == []


@pytest.mark.parametrize("orientation", [1, 2, 3, 4, 5, 6, 7, 8])
def test_decode_for_budget_exif_orientation(orientation: int, jpeg_backend: str) -> None:
    data = _jpeg_bytes(_quadrants((1600, 1000)), exif=_exif(orientation))
    out = decode_for_budget(data, **BUDGET_256)
    assert out.size == _target(1600, 1000, orientation)
    assert out.mode == "RGB"
    assert out.getexif().get(0x0112, 1) == 1  # nothing downstream may rotate it again
    # Same picture as the straightforward pipeline (full decode, exif_transpose, BICUBIC resize).
    reference = prepare_image(decode_image(data), **BUDGET_256)
    assert _mean_abs_diff(out, reference) < 2.0


def test_decode_for_budget_png_with_alpha_on_white() -> None:
    img = Image.new("RGBA", (900, 600), (0, 0, 0, 0))
    img.paste((10, 20, 200, 255), (0, 0, 450, 600))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    out = decode_for_budget(buf.getvalue(), **BUDGET_256)
    assert out.size == _target(900, 600) and out.mode == "RGB"
    assert out.getpixel((5, 5)) == (10, 20, 200)
    assert out.getpixel((out.width - 5, 5)) == (255, 255, 255)
    # Palette with a transparent index takes the same route.
    buf = io.BytesIO()
    img.convert("P").save(buf, format="PNG", transparency=0)
    pal = decode_for_budget(buf.getvalue(), **BUDGET_256)
    assert pal.size == out.size and pal.getpixel((out.width - 5, 5)) == (255, 255, 255)


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_decode_for_budget_grey_and_cmyk_jpeg(mode: str, jpeg_backend: str) -> None:
    data = _jpeg_bytes(_quadrants((1200, 1300)).convert(mode))
    assert Image.open(io.BytesIO(data)).mode == mode
    out = decode_for_budget(data, **BUDGET_256)
    assert out.size == _target(1200, 1300) and out.mode == "RGB"
    assert _mean_abs_diff(out, prepare_image(decode_image(data), **BUDGET_256)) < 2.0


def test_decode_for_budget_16bit_png() -> None:
    img = Image.new("I;16", (700, 500), 40000)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    out = decode_for_budget(buf.getvalue(), **BUDGET_256)
    assert out.size == _target(700, 500)
    assert out.getpixel((10, 10)) == (156, 156, 156)


def test_decode_for_budget_tiny_image_is_upscaled_to_min_pixels() -> None:
    out = decode_for_budget(_png_bytes((10, 10)), **BUDGET_256)
    assert out.size == (56, 56) == _target(10, 10)
    assert out.getpixel((20, 20)) == (200, 10, 10)


def test_decode_for_budget_errors(jpeg_backend: str) -> None:
    jpeg = _jpeg_bytes(Image.effect_noise((1200, 900), 64).convert("RGB"))
    cases = [
        (b"", "empty_file"),
        (b"this is not an image at all", "decode_error"),
        (jpeg[: len(jpeg) // 2], "decode_error"),  # truncated, and decoded at a reduced DCT scale
        (_bomb_png(10_000, 10_000), "image_bomb"),
        (_bomb_png(60_000, 60_000), "image_bomb"),
        (_png_bytes((2011, 10)), "bad_aspect_ratio"),
    ]
    for data, code in cases:
        with pytest.raises(InputError) as ei:
            decode_for_budget(data, **BUDGET_256)
        assert ei.value.code == code
    with pytest.raises(InputError) as ei:
        decode_for_budget(_png_bytes((100, 100)), max_pixels_guard=9_999, **BUDGET_256)
    assert ei.value.code == "image_bomb"


def _segment(marker: int, body: bytes) -> bytes:
    return b"\xff" + bytes([marker]) + struct.pack(">H", len(body) + 2) + body


def _marker_at(jpeg: bytes, marker: int) -> int:
    """Offset of the first ``marker`` segment before the scan data."""
    pos = 2
    while jpeg[pos + 1] != marker:
        pos += 2 + struct.unpack(">H", jpeg[pos + 2 : pos + 4])[0]
    return pos


def _damaged_but_viewable(jpeg: bytes) -> dict[str, bytes]:
    """JPEGs every viewer shows and libjpeg-turbo warns about, as cameras, editors and transfers leave them."""
    dqt, sos = _marker_at(jpeg, 0xDB), _marker_at(jpeg, 0xDA)
    broken_exif = b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x05\x01\x12\x00\x03\xff\xff"  # 5 entries, 1 there
    return {
        "bytes before EOI": jpeg[:-2] + b"\x00" * 5 + jpeg[-2:],
        "bytes before a table marker": jpeg[:dqt] + b"\x00\x00\x00" + jpeg[dqt:],
        "damaged EXIF block": jpeg[:2] + _segment(0xE1, broken_exif) + jpeg[2:],
        "ICC marker after SOF": jpeg[:sos] + _segment(0xE2, b"ICC_PROFILE\x00\x01\x01" + bytes(128)) + jpeg[sos:],
        "Photoshop block": jpeg[:2]
        + _segment(0xED, b"Photoshop 3.0\x008BIM\x04\x04\x00\x00\x00\x00\x00\x05ab")
        + jpeg[2:],
    }


def test_damaged_but_viewable_jpegs_decode(jpeg_backend: str) -> None:
    clean = _jpeg_bytes(_quadrants((1200, 900)))
    reference = decode_for_budget(clean, **BUDGET_256)
    for name, data in _damaged_but_viewable(clean).items():
        out = decode_for_budget(data, **BUDGET_256)
        assert out.size == reference.size, name
        assert _mean_abs_diff(out, reference) < 1.0, name


def test_a_truncated_jpeg_stays_a_decode_error_on_every_path(jpeg_backend: str) -> None:
    # libjpeg-turbo only warns about it too, but a grey half is not the photo: its pixels are missing.
    jpeg = _jpeg_bytes(Image.effect_noise((1200, 900), 64).convert("RGB"))
    for cut in (len(jpeg) // 2, len(jpeg) - 40):
        with pytest.raises(InputError) as err:
            decode_for_budget(jpeg[:cut], **BUDGET_256)
        assert err.value.code == "decode_error"


# ----------------------------------------------------------------------------------------- sources


def test_local_path_inside_root(tmp_path: Path) -> None:
    p = tmp_path / "a.png"
    p.write_bytes(_png_bytes())
    assert load_source(str(p), allowed_roots=[tmp_path], max_bytes=10**6, url_timeout_s=5) == p.read_bytes()


def test_local_path_errors(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "secret.png"
    outside.write_bytes(_png_bytes())
    (root / "escape.png").symlink_to(outside)
    (root / "empty.png").write_bytes(b"")
    (root / "big.png").write_bytes(b"x" * 2000)
    kw = {"allowed_roots": [root], "max_bytes": 1000, "url_timeout_s": 5.0}
    cases = [
        (str(outside), "outside_roots"),
        (str(root / "escape.png"), "outside_roots"),
        (str(root / ".." / "secret.png"), "outside_roots"),
        (str(root / "missing.png"), "not_found"),
        (str(root / "empty.png"), "empty_file"),
        (str(root / "big.png"), "too_large"),
        ("ftp://example.com/a.png", "unsupported_source"),
    ]
    for source, code in cases:
        with pytest.raises(InputError) as ei:
            load_source(source, **kw)  # type: ignore[arg-type]
        assert ei.value.code == code, source
    # A symlink that stays within the root is fine.
    (root / "real.png").write_bytes(_png_bytes())
    (root / "link.png").symlink_to(root / "real.png")
    assert load_source(str(root / "link.png"), **kw) == (root / "real.png").read_bytes()  # type: ignore[arg-type]


def test_data_url() -> None:
    data = _png_bytes()
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    got = load_source(url, allowed_roots=[], max_bytes=10**6, url_timeout_s=5)
    assert got == data
    assert decode_image(got).size == (40, 30)
    for bad, code in [
        ("data:text/plain;base64,aGVsbG8=", "unsupported_source"),
        ("data:image/png;base64,!!!notbase64", "decode_error"),
        ("data:image/png;base64,", "empty_file"),
    ]:
        with pytest.raises(InputError) as ei:
            load_source(bad, allowed_roots=[], max_bytes=10**6, url_timeout_s=5)
        assert ei.value.code == code, bad
    with pytest.raises(InputError) as ei:
        load_source(url, allowed_roots=[], max_bytes=10, url_timeout_s=5)
    assert ei.value.code == "too_large"


class _Handler(http.server.BaseHTTPRequestHandler):
    png = _png_bytes()

    def do_GET(self) -> None:
        if self.path == "/img.png":
            self._send(200, self.png)
        elif self.path == "/big":
            self._send(200, b"x" * 50_000)
        elif self.path == "/big-chunked":  # no Content-Length: the cap must hold while streaming
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            for _ in range(50):
                self.wfile.write(b"x" * 1000)
        elif self.path == "/empty":
            self._send(200, b"")
        elif self.path == "/boom":
            self._send(500, b"oops")
        else:
            self._send(404, b"nope")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_base() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# The test server is on loopback, which image URLs may reach only when the operator allows it.
LOOPBACK = UrlPolicy(addresses=AddressPolicy.of(["127.0.0.1/32"]))


def test_url_sources(http_base: str) -> None:
    kw = {"allowed_roots": [], "max_bytes": 10_000, "url_timeout_s": 5.0, "url_policy": LOOPBACK}
    got = load_source(f"{http_base}/img.png", **kw)  # type: ignore[arg-type]
    assert got == _Handler.png
    assert decode_image(got).size == (40, 30)
    for path, code in [
        ("/big", "too_large"),
        ("/big-chunked", "too_large"),
        ("/empty", "empty_file"),
        ("/missing", "not_found"),
        ("/boom", "fetch_error"),
    ]:
        with pytest.raises(InputError) as ei:
            load_source(f"{http_base}{path}", **kw)  # type: ignore[arg-type]
        assert ei.value.code == code, path


def test_url_unreachable() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(InputError) as ei:
        load_source(
            f"http://127.0.0.1:{port}/x.png", allowed_roots=[], max_bytes=100, url_timeout_s=2, url_policy=LOOPBACK
        )
    assert ei.value.code == "fetch_error"


def test_url_to_loopback_is_refused_without_the_allowlist(http_base: str) -> None:
    with pytest.raises(InputError) as ei:
        load_source(f"{http_base}/img.png", allowed_roots=[], max_bytes=10_000, url_timeout_s=5)
    assert ei.value.code == "url_forbidden"


def test_turbo_decodes_at_exactly_the_asked_scale_and_refuses_corrupt_data() -> None:
    if not turbo.available():
        pytest.skip("simplejpeg not importable")

    def shape(data: bytes, shrink: int) -> tuple[int, ...]:
        decoded = turbo.decode_scaled(data, shrink=shrink)
        assert decoded is not None
        return tuple(decoded.shape)

    data = _jpeg_bytes(_quadrants((4003, 3001)))
    assert shape(data, 2) == (1501, 2002, 3)  # ceil, as Pillow's draft
    assert shape(data, 8) == (376, 501, 3)
    assert shape(data, 1) == (3001, 4003, 3)
    assert shape(_jpeg_bytes(Image.new("L", (800, 600), 77)), 4) == (150, 200, 1)
    cmyk = _jpeg_bytes(Image.new("CMYK", (64, 64), (1, 2, 3, 4)))
    assert turbo.decode_scaled(cmyk, shrink=2) is None  # left to Pillow, which converts CMYK
    with pytest.raises(InputError) as err:
        turbo.decode_scaled(data[: len(data) // 3], shrink=2)
    assert err.value.code == "decode_error"
