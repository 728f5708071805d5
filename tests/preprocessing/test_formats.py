"""Photo formats beyond Pillow's own (preprocessing.formats) and the ones Pillow reads that were refused: each
decodes upright, at exactly the smart_resize size of its upright original, with its facts; the files are
written here by the libraries that can write them (pillow-heif, libjxl and libavif through imagecodecs,
Pillow), the DNG by ``benchmarks.dng_sample``."""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageChops, ImageOps, ImageStat

from benchmarks.dng_sample import dng_bytes
from benchmarks.hostile_api.decoders import animated_jxl, heic_past_ispe, jxl_garbage, jxlp_then_jxlc
from preprocessing import formats
from preprocessing.formats import heif, jxl, raw
from preprocessing.images import budget_pixels, decode_for_budget, smart_resize, upright_size
from preprocessing.input_errors import InputError

BUDGET = {"factor": 28, "min_pixels": 56 * 56, "max_pixels": budget_pixels(256, patch_size=14, merge_size=2)}
RED, GREEN, BLUE, YELLOW = (220, 30, 30), (30, 200, 30), (30, 30, 220), (230, 230, 40)

imagecodecs = pytest.importorskip("imagecodecs")


def _quadrants(size: tuple[int, int]) -> Image.Image:
    """Four flat colours: any wrong rotation, flip or channel order shows in the corners."""
    w, h = size
    img = Image.new("RGB", size, RED)
    img.paste(GREEN, (w // 2, 0, w, h // 2))
    img.paste(BLUE, (0, h // 2, w // 2, h))
    img.paste(YELLOW, (w // 2, h // 2, w, h))
    return img


def _target(width: int, height: int, orientation: int = 1) -> tuple[int, int]:
    up_w, up_h = upright_size(width, height, orientation)
    h, w = smart_resize(up_h, up_w, **BUDGET)
    return w, h


def _corners(img: Image.Image) -> list[tuple[int, ...]]:
    w, h = img.size
    return [img.getpixel((x, y)) for x, y in ((8, 8), (w - 9, 8), (8, h - 9), (w - 9, h - 9))]  # type: ignore[misc]


def _close(got: list[tuple[int, ...]], want: list[tuple[int, int, int]], tol: int = 24) -> bool:
    return all(max(abs(a - b) for a, b in zip(g, w, strict=True)) <= tol for g, w in zip(got, want, strict=True))


def _save(img: Image.Image, fmt: str, **kwargs: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kwargs)
    return buf.getvalue()


def _exif(orientation: int = 1, **text: str) -> Image.Exif:
    exif = Image.Exif()
    exif[0x0112] = orientation
    exif[0x010F] = text.get("make", "Apple")
    exif[0x0110] = text.get("model", "iPhone 15 Pro")
    sub = exif.get_ifd(0x8769)
    sub[0x9003] = "2024:06:01 10:20:30"
    sub[0x9011] = "-07:00"
    sub[0xA434] = "iPhone 15 Pro back triple camera 6.86mm f/1.78"
    return exif


# Rotating the four quadrants by EXIF 6 (90 degrees clockwise): top-left becomes blue, and so on.
UPRIGHT_AFTER_6 = [BLUE, RED, YELLOW, GREEN]


# ------------------------------------------------------------------------------------------------ HEIC


@pytest.fixture(autouse=True)
def _heif_plugin() -> None:
    assert heif.register()


def test_heic_rotated_by_its_own_transform_decodes_upright_with_its_facts() -> None:
    # An iPhone's layout: the pixels as the sensor saw them, an ``irot`` turning them, EXIF orientation 6.
    data = _save(_quadrants((800, 600)), "HEIF", exif=_exif(6).tobytes(), quality=90)
    assert formats.sniff(data) == "heif"
    out = decode_for_budget(data, **BUDGET)
    assert out.size == _target(800, 600, 6) and out.mode == "RGB"
    assert _close(_corners(out), UPRIGHT_AFTER_6)
    facts = out.info["photo"]
    assert facts == {
        "taken_at": "2024-06-01T10:20:30-07:00",
        "make": "Apple",
        "model": "iPhone 15 Pro",
        "lens": "iPhone 15 Pro back triple camera 6.86mm f/1.78",
        "width": 600,
        "height": 800,
        "orientation": 6,
        "gps": None,
    }


@pytest.mark.parametrize("orientation", range(1, 9))
def test_heic_rotations_and_mirrors_show_as_the_same_jpeg_would(orientation: int) -> None:
    # pillow-heif writes an EXIF orientation as the file's own ``irot``/``imir``; each must come out upright.
    picture = _quadrants((640, 400))
    heic = decode_for_budget(_save(picture, "HEIF", exif=_exif(orientation).tobytes(), quality=95), **BUDGET)
    jpeg = decode_for_budget(_save(picture, "JPEG", exif=_exif(orientation).tobytes(), quality=95), **BUDGET)
    assert heic.size == jpeg.size == _target(640, 400, orientation)
    assert _close(_corners(heic), _corners(jpeg))  # type: ignore[arg-type]
    assert heic.info["photo"]["orientation"] == orientation


def test_heic_whose_exif_says_rotate_but_whose_file_does_not_is_not_turned_twice() -> None:
    # Another maker's layout: EXIF orientation 6 in the metadata but no ``irot``. HEIF readers follow the
    # file's own transforms only (ISO/IEC 23008-12), as viewers do.
    data = _save(_quadrants((800, 600)), "HEIF", exif=_exif(6, make="samsung", model="SM-S918B"), quality=90)
    out = decode_for_budget(data, **BUDGET)
    assert out.size == _target(800, 600)
    assert _close(_corners(out), [RED, GREEN, BLUE, YELLOW])
    assert out.info["photo"]["make"] == "samsung"


def test_ten_bit_heic_comes_out_as_eight_bit_rgb() -> None:
    import pillow_heif

    ten_bit = (np.asarray(_quadrants((320, 240)), dtype=np.uint16) * 4).astype(np.uint16)  # 0..1020 of 1023
    heic = pillow_heif.from_bytes(mode="RGB;16", size=(320, 240), data=(ten_bit << 6).tobytes())
    buf = io.BytesIO()
    heic.save(buf, format="HEIF", quality=-1)
    assert Image.open(io.BytesIO(buf.getvalue())).info["bit_depth"] == 10
    out = decode_for_budget(buf.getvalue(), **BUDGET)
    assert out.size == _target(320, 240) and out.mode == "RGB"
    assert _close(_corners(out), [RED, GREEN, BLUE, YELLOW])


def test_heic_without_its_plugin_is_unsupported_with_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _save(_quadrants((64, 48)), "HEIF")
    monkeypatch.setattr(heif, "register", lambda: False)
    with pytest.raises(InputError) as err:
        decode_for_budget(data, **BUDGET)
    assert err.value.code == "unsupported_format" and "convert it to JPEG" in err.value.message


def test_a_heic_header_over_nothing_is_a_decode_error() -> None:
    with pytest.raises(InputError) as err:
        decode_for_budget(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 200, **BUDGET)
    assert err.value.code == "decode_error"


HEIF_FIXTURES = Path(__file__).parent / "fixtures" / "pillow_heif"


def test_a_real_iphone_heic_decodes_with_its_facts() -> None:
    out = decode_for_budget((HEIF_FIXTURES / "iphone-xs.heic").read_bytes(), **BUDGET)
    assert out.size == _target(1025, 900) and out.mode == "RGB"
    assert out.info["photo"] == {
        "taken_at": "2021-07-06T16:08:14+03:00",
        "make": "Apple",
        "model": "iPhone XS",
        "lens": "Apple iPhone XS back dual camera 4.25mm f/1.8",
        "width": 1025,
        "height": 900,
        "orientation": 1,
        "gps": {"latitude": 46.7547028, "longitude": 33.3361056, "altitude": 7.69},
    }


@pytest.mark.parametrize(("name", "size"), [("sony-ilce-7sm3-grey.heic", (64, 64)), ("chroma444.heif", (29, 100))])
def test_other_real_heif_layouts_decode(name: str, size: tuple[int, int]) -> None:
    out = decode_for_budget((HEIF_FIXTURES / name).read_bytes(), **BUDGET)
    assert out.size == _target(*size) and out.mode == "RGB"
    assert (out.info["photo"]["width"], out.info["photo"]["height"]) == size


# ------------------------------------------------------------------------------------------------ AVIF


@pytest.mark.parametrize("bits", [8, 10])
def test_avif_eight_and_ten_bit(bits: int) -> None:
    pixels = np.asarray(_quadrants((640, 480)), dtype=np.uint16)
    if bits == 10:
        pixels = pixels * 4
    data = imagecodecs.avif_encode(pixels.astype(np.uint8 if bits == 8 else np.uint16), level=90, bitspersample=bits)
    out = decode_for_budget(data, **BUDGET)
    assert out.size == _target(640, 480) and out.mode == "RGB"
    assert _close(_corners(out), [RED, GREEN, BLUE, YELLOW])


# -------------------------------------------------------------------------------------------- JPEG XL


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("container", [False, True])
def test_jpeg_xl_eight_and_sixteen_bit(bits: int, container: bool) -> None:
    pixels = np.asarray(_quadrants((900, 700)), dtype=np.uint16)
    pixels = pixels * 257 if bits == 16 else pixels
    data = imagecodecs.jpegxl_encode(
        pixels.astype(np.uint8 if bits == 8 else np.uint16), distance=1.0, bitspersample=bits, usecontainer=container
    )
    assert formats.sniff(data) == "jxl"
    out = decode_for_budget(data, **BUDGET)
    assert out.size == _target(900, 700) and out.mode == "RGB"
    assert _close(_corners(out), [RED, GREEN, BLUE, YELLOW])
    assert out.info["photo"]["width"] == 900 and out.info["photo"]["height"] == 700


def _jxl_header(height_div8: int, ratio: int, orientation: int) -> bytes:
    """A codestream's first bytes by hand: small SizeHeader, then ImageMetadata with an orientation."""
    bits = [1, *((height_div8 - 1) >> k & 1 for k in range(5)), *(ratio >> k & 1 for k in range(3))]
    bits += [0, 1, *((orientation - 1) >> k & 1 for k in range(3))]  # not all_default, extra_fields, orientation
    bits += [0] * (-len(bits) % 8)
    body = bytes(sum(bits[i + k] << k for k in range(8)) for i in range(0, len(bits), 8))
    return b"\xff\x0a" + body + b"\x00" * 16


@pytest.mark.parametrize(("ratio", "width"), [(1, 64), (3, 85), (7, 128)])
@pytest.mark.parametrize("orientation", [1, 6, 8])
def test_jpeg_xl_header_gives_size_and_orientation_before_any_pixel(ratio: int, width: int, orientation: int) -> None:
    assert jxl.header(_jxl_header(8, ratio, orientation)) == ((width, 64), orientation)


def test_jpeg_xl_declaring_too_many_pixels_is_refused_before_libjxl_runs() -> None:
    # 32 x 8 = 256 rows, 2:1: 512 x 256; a guard of 100k pixels refuses it from the header alone.
    with pytest.raises(InputError) as err:
        decode_for_budget(_jxl_header(32, 7, 1), max_pixels_guard=100_000, **BUDGET)
    assert err.value.code == "image_bomb"


def test_an_animated_jpeg_xl_decodes_its_first_frame_only() -> None:
    frames = np.stack([np.full((96, 128, 3), colour, np.uint8) for colour in (RED, GREEN, BLUE)])
    data = bytes(imagecodecs.jpegxl_encode(frames, distance=1.0))
    out = decode_for_budget(data, **BUDGET)
    assert out.size == _target(128, 96) and _close(_corners(out), [RED] * 4)


def test_a_jpeg_xl_animation_of_64_large_frames_costs_one_frame() -> None:
    """Counted, not timed: libjxl is asked for one frame, so the 63 others are never decoded into memory."""
    data = animated_jxl(frames=64, side=512)
    decoded: list[tuple[int, ...]] = []
    real = imagecodecs.jpegxl_decode

    def spy(*args: Any, **kwargs: Any) -> Any:
        pixels = real(*args, **kwargs)
        decoded.append(pixels.shape)
        return pixels

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(imagecodecs, "jpegxl_decode", spy)
        out = decode_for_budget(data, **BUDGET)
    assert decoded == [(512, 512)] and out.size == _target(512, 512)
    assert len(imagecodecs.jpegxl_decode(data)) == 64  # the file is the animation it claims to be


def test_a_jxlp_codestream_before_a_jxlc_box_is_guarded_by_the_size_libjxl_decodes() -> None:
    # libjxl joins the jxlp part (2000 x 2000) and the jxlc box (64 x 64) and decodes the first image.
    data = jxlp_then_jxlc(big=2000, small=64)
    assert imagecodecs.jpegxl_decode(data).shape == (2000, 2000)
    with pytest.raises(InputError) as err:
        decode_for_budget(data, max_pixels_guard=1_000_000, **BUDGET)
    assert err.value.code == "image_bomb" and "2000x2000" in err.value.message


def _container(*boxes: tuple[bytes, bytes]) -> bytes:
    signature = b"\x00\x00\x00\x0cJXL \x0d\x0a\x87\x0a"
    boxes = ((b"ftyp", b"jxl \x00\x00\x00\x00jxl "), *boxes)
    return signature + b"".join(struct.pack(">I4s", 8 + len(body), kind) + body for kind, body in boxes)


def test_a_jpeg_xl_codestream_split_over_parts_decodes_and_broken_boxes_are_refused_before_libjxl() -> None:
    codestream = bytes(imagecodecs.jpegxl_encode(np.asarray(_quadrants((200, 120)))))
    first, last = struct.pack(">I", 0), struct.pack(">I", 0x80000001)
    split = _container((b"jxlp", first + codestream[:9]), (b"jxlp", last + codestream[9:]))
    assert decode_for_budget(split, **BUDGET).size == _target(200, 120)
    after_last = _container((b"jxlc", codestream), (b"jxlp", first + codestream))
    past_end = _container((b"jxlc", codestream))[:-10] + struct.pack(">I4s", 4096, b"Exif")
    many = _container(*[(b"free", b"")] * (jxl.MAX_BOXES + 1), (b"jxlc", codestream))
    for data, words in ((after_last, "after"), (past_end, "past the file's end"), (many, "boxes")):
        with pytest.raises(InputError) as err:
            decode_for_budget(data, **BUDGET)
        assert err.value.code == "decode_error" and words in err.value.message


@pytest.mark.parametrize(("data", "words"), [(jxl_garbage(), "JPEG XL"), (heic_past_ispe(), "size")])
def test_a_decoder_library_failure_is_a_decode_error_with_its_message(data: bytes, words: str) -> None:
    with pytest.raises(InputError) as err:
        decode_for_budget(data, **BUDGET)
    assert err.value.code == "decode_error" and words in err.value.message


def test_a_runtime_error_of_any_decoder_is_a_decode_error_not_an_unexpected_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libheif's decoder plugins and imagecodecs raise a bare RuntimeError for a stream they cannot decode; the item
    gets decode_error with the library's words, not preprocess_error ("unexpected", with a traceback)."""
    from PIL import PngImagePlugin

    def fail(self: Any) -> None:
        raise RuntimeError("Decoder plugin generated an error: the stream exceeds the image's ispe")

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", fail)
    with pytest.raises(InputError) as err:
        decode_for_budget(_save(_quadrants((300, 200)), "PNG"), **BUDGET)
    assert err.value.code == "decode_error" and "exceeds the image's ispe" in err.value.message


# ------------------------------------------------------------------------------------------------ RAW


def _spy_raw_path(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    taken: list[str] = []
    real_preview, real_demosaic = raw._preview, raw._demosaic

    def preview(*args: Any) -> Image.Image | None:
        img = real_preview(*args)
        taken.append("preview" if img is not None else "no preview")
        return img

    def demosaic(*args: Any) -> Image.Image:
        taken.append("demosaic")
        return real_demosaic(*args)

    monkeypatch.setattr(raw, "_preview", preview)
    monkeypatch.setattr(raw, "_demosaic", demosaic)
    return taken


def test_dng_whose_preview_covers_the_budget_takes_the_preview(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = _spy_raw_path(monkeypatch)
    data = dng_bytes(_quadrants((1200, 800)), preview_size=(1200, 800), orientation=6)
    assert formats.sniff(data) == "raw"
    out = decode_for_budget(data, **BUDGET)
    assert taken == ["preview"]
    assert out.size == _target(1200, 800, 6)
    assert _close(_corners(out), UPRIGHT_AFTER_6)
    assert out.info["photo"] == {
        "taken_at": "2024-05-01T12:34:56+02:00",
        "make": "Testmaker",
        "model": "Test Camera 1",
        "lens": "Test Lens 24-70mm",
        "width": 800,
        "height": 1200,
        "orientation": 6,
        "gps": {"latitude": 48.8584, "longitude": 2.2945},
    }


@pytest.mark.parametrize("preview", [(256, 170), None])
def test_dng_without_a_large_enough_preview_is_demosaiced(
    monkeypatch: pytest.MonkeyPatch, preview: tuple[int, int] | None
) -> None:
    taken = _spy_raw_path(monkeypatch)
    out = decode_for_budget(dng_bytes(_quadrants((1200, 800)), preview_size=preview), **BUDGET)
    assert taken[-1] == "demosaic"
    assert out.size == _target(1200, 800)
    # The test camera's colours are not calibrated: each quadrant only has to be dominated by its colour.
    tl, tr, bl, br = _corners(out)
    assert tl[0] > tl[1] and tl[0] > tl[2] and tr[1] > tr[2] and bl[2] > bl[0] and br[0] > br[2] and br[1] > br[2]


def test_raw_declaring_too_many_pixels_is_refused_before_unpacking() -> None:
    with pytest.raises(InputError) as err:
        decode_for_budget(dng_bytes(_quadrants((1200, 800))), max_pixels_guard=500_000, **BUDGET)
    assert err.value.code == "image_bomb"


def test_raw_libraw_does_not_read_is_unsupported_with_what_to_do() -> None:
    with pytest.raises(InputError) as err:
        decode_for_budget(b"FUJIFILMCCD-RAW 0201FF383501" + b"\x00" * 400, **BUDGET)
    assert err.value.code in ("unsupported_format", "decode_error")
    if err.value.code == "unsupported_format":
        assert "export the photo as JPEG" in err.value.message


def test_a_plain_tiff_is_not_taken_for_a_raw() -> None:
    assert formats.sniff(_save(_quadrants((64, 48)), "TIFF")) is None


# ------------------------------------------------------------------------------- formats Pillow reads


@pytest.mark.parametrize(
    ("fmt", "kwargs"),
    [("WEBP", {"quality": 95}), ("JPEG2000", {}), ("TIFF", {}), ("PNG", {})],
)
def test_pillow_formats_decode_upright(fmt: str, kwargs: dict[str, Any]) -> None:
    out = decode_for_budget(_save(_quadrants((700, 500)), fmt, **kwargs), **BUDGET)
    assert out.size == _target(700, 500)
    assert _close(_corners(out), [RED, GREEN, BLUE, YELLOW])


def test_sixteen_bit_grey_tiff_keeps_its_top_eight_bits() -> None:
    out = decode_for_budget(_save(Image.new("I;16", (300, 200), 40000), "TIFF"), **BUDGET)
    assert out.getpixel((10, 10)) == (156, 156, 156)


def test_mpo_decodes_its_primary_image() -> None:
    first, second = _quadrants((800, 600)), Image.new("RGB", (800, 600), (0, 0, 0))
    data = _save(first, "MPO", save_all=True, append_images=[second])
    out = decode_for_budget(data, **BUDGET)
    assert _close(_corners(out), [RED, GREEN, BLUE, YELLOW])


def _fixed(v: float) -> bytes:
    return struct.pack(">i", round(v * 65536))


def _adobe_rgb_profile() -> bytes:
    """An ICC v2 matrix/TRC display profile with Adobe RGB (1998)'s primaries (D50-adapted) and gamma 2.2,
    written by hand: Pillow writes no profile but sRGB."""
    desc_text = b"Adobe RGB (1998) test\0"
    tags = {
        b"desc": b"desc\0\0\0\0" + struct.pack(">I", len(desc_text)) + desc_text + bytes(4 + 4 + 2 + 1 + 67),
        b"wtpt": b"XYZ \0\0\0\0" + _fixed(0.9642) + _fixed(1.0) + _fixed(0.8249),
        b"rXYZ": b"XYZ \0\0\0\0" + _fixed(0.6097) + _fixed(0.3111) + _fixed(0.0195),
        b"gXYZ": b"XYZ \0\0\0\0" + _fixed(0.2053) + _fixed(0.6257) + _fixed(0.0609),
        b"bXYZ": b"XYZ \0\0\0\0" + _fixed(0.1492) + _fixed(0.0632) + _fixed(0.7446),
        b"cprt": b"text\0\0\0\0" + b"public domain\0",
    }
    curve = b"curv\0\0\0\0" + struct.pack(">IH", 1, 0x0233) + b"\0\0"
    table = b""
    body = b""
    offset = 128 + 4 + 12 * (len(tags) + 3)
    entries = [*tags.items(), (b"rTRC", curve), (b"gTRC", curve), (b"bTRC", curve)]
    for sig, data in entries:
        data += b"\0" * (-len(data) % 4)
        table += sig + struct.pack(">II", offset + len(body), len(data))
        body += data
    size = offset + len(body)
    header = struct.pack(">I4sI4s4s4s", size, b"\0\0\0\0", 0x02100000, b"mntr", b"RGB ", b"XYZ ")
    header += bytes(12) + b"acsp" + bytes(4 + 4 + 4 + 4 + 8 + 4)
    header += _fixed(0.9642) + _fixed(1.0) + _fixed(0.8249) + bytes(4 + 16 + 28)
    assert len(header) == 128
    return header + struct.pack(">I", len(entries)) + table + body


def test_an_adobe_rgb_photo_is_converted_to_srgb_and_an_srgb_one_left_alone() -> None:
    from PIL import ImageCms

    flat = Image.new("RGB", (300, 200), (200, 60, 40))
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    same = decode_for_budget(_save(flat, "PNG", icc_profile=srgb), **BUDGET)
    assert same.getpixel((5, 5)) == (200, 60, 40)
    for fmt in ("PNG", "JPEG"):
        moved = decode_for_budget(_save(flat, fmt, icc_profile=_adobe_rgb_profile(), quality=95), **BUDGET)
        red, green, blue = moved.getpixel((5, 5))  # type: ignore[misc]
        assert red > 220 and green < 60 and blue < 40, (fmt, red, green, blue)  # Adobe RGB red is beyond sRGB red


# ------------------------------------------------------------------------------ Pillow's own test images

PILLOW_IMAGES = sorted((Path(__file__).parent / "fixtures" / "pillow").iterdir())


@pytest.mark.parametrize("path", PILLOW_IMAGES, ids=lambda p: p.name)
def test_pillow_test_images_decode_as_pillow_shows_them(path: Path) -> None:
    # Every file here is one Pillow decodes; none may be refused, and each comes out as Pillow shows it:
    # upright (EXIF, or the file's own rotation and mirror) at the smart_resize size of the upright original.
    data = path.read_bytes()
    out = decode_for_budget(data, **BUDGET)
    with Image.open(io.BytesIO(data)) as opened:
        opened.load()
        reference = ImageOps.exif_transpose(opened)
    assert out.size == _target(*reference.size) and out.mode == "RGB"
    assert out.info["photo"]["width"] == reference.width
    if reference.mode in ("RGB", "RGBA", "L", "P") and min(reference.size) >= 16:
        # Pillow's picture, upright, is closer to ours than any other turn or mirror of it.
        diffs = {
            turn: _mean_abs_diff(out, pic.convert("RGB").resize(out.size, Image.Resampling.BICUBIC))
            for turn, pic in [("upright", reference)] + [(t.name, reference.transpose(t)) for t in Image.Transpose]
            if pic.size == reference.size
        }
        assert min(diffs, key=diffs.__getitem__) == "upright", diffs
        assert diffs["upright"] < 12.0


def _mean_abs_diff(a: Image.Image, b: Image.Image) -> float:
    return sum(ImageStat.Stat(ImageChops.difference(a.convert("RGB"), b.convert("RGB"))).mean) / 3


def test_the_dashboards_thumbnail_decode_reads_the_new_formats_too() -> None:
    from preprocessing.images import decode_image

    picture = _quadrants((1200, 800))
    pixels = np.asarray(picture)
    files = {
        "heic": _save(picture, "HEIF", exif=_exif(6).tobytes()),
        "jxl": bytes(imagecodecs.jpegxl_encode(pixels)),
        "dng": dng_bytes(picture, preview_size=(600, 400), orientation=6),
    }
    for kind, data in files.items():
        img = decode_image(data, draft_size=(512, 512))
        assert img.mode == "RGB", kind
        upright = (800, 1200) if kind != "jxl" else (1200, 800)
        assert img.width / img.height == pytest.approx(upright[0] / upright[1], rel=0.02), kind
