"""Thumbnails as a decoder child makes them: from a path inside the roots or a data URL, upright, at most the size
asked, with the worker's format and bomb checks; the same through libvips and through Pillow."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image

from preprocessing import vips
from preprocessing.images import decode_for_budget, upright_header_size
from preprocessing.input_errors import InputError
from preprocessing.thumbnails import thumbnail_jpeg
from tests.support.format_album import format_album


@pytest.fixture(params=["vips", "pillow"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pillow":
        monkeypatch.setattr(vips, "thumbnail_jpeg", lambda data, *, size: None)
    elif not vips.available():
        pytest.skip("libvips is not installed")
    return str(request.param)


def _size(jpeg: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(jpeg)).size


def test_a_thumbnail_is_upright_and_small(tmp_path: Path, decoder: str) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown portrait
    Image.new("RGB", (1200, 900), (200, 30, 30)).save(tmp_path / "p.jpg", exif=exif.tobytes())
    Image.new("RGBA", (1000, 500), (0, 0, 200, 90)).save(tmp_path / "a.png")
    made = {
        n: thumbnail_jpeg(str(tmp_path / n), allowed_roots=[tmp_path], max_bytes=1 << 24, size=256)
        for n in ("p.jpg", "a.png")
    }
    assert _size(made["p.jpg"]) == (192, 256) and _size(made["a.png"]) == (256, 128)
    buf = io.BytesIO()
    Image.new("RGB", (64, 32)).save(buf, "PNG")
    data_url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    assert _size(thumbnail_jpeg(data_url, allowed_roots=[], max_bytes=1 << 24, size=256)) == (64, 32)


def test_what_a_worker_refuses_makes_no_thumbnail(tmp_path: Path, decoder: str) -> None:
    Image.new("RGB", (300, 300)).save(tmp_path / "big.png")
    (tmp_path / "fake.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.png"
    Image.new("RGB", (10, 10)).save(outside)
    root = [tmp_path]
    cases = {
        str(tmp_path / "big.png"): "image_bomb",  # over the guard given below
        str(tmp_path / "fake.jpg"): "decode_error",
        str(outside): "outside_roots",
        "https://example.com/a.jpg": "unsupported_source",
    }
    for source, code in cases.items():
        with pytest.raises(InputError) as caught:
            thumbnail_jpeg(source, allowed_roots=root, max_bytes=1 << 24, size=256, max_pixels_guard=50_000)
        assert caught.value.code == code, (source, caught.value)
    outside.unlink()


def _mean(img: Image.Image) -> tuple[float, ...]:
    return tuple(float(v) for v in img.convert("RGB").resize((1, 1), Image.Resampling.BOX).getpixel((0, 0)))


@pytest.mark.parametrize(
    "name", ["iphone-xs.heic", "camera.dng", "photo.jxl", "exif.avif", "rot1mir0.avif", "hopper_merged.psd"]
)
def test_every_format_the_worker_reads_makes_a_thumbnail_of_the_picture_the_worker_sees(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even where libvips has no decoder for it (as this machine's has none for HEVC): the worker's decoder makes it."""

    def no_loader(data: bytes, *, size: int) -> bytes:
        raise InputError(
            "decode_error", "thumbnail decode failed: Support for this compression format has not been built in"
        )

    monkeypatch.setattr(vips, "thumbnail_jpeg", no_loader)
    path = format_album(tmp_path)[name]
    made = Image.open(io.BytesIO(thumbnail_jpeg(str(path), allowed_roots=[tmp_path], max_bytes=1 << 24, size=256)))
    # What a worker sees of it at a small budget (a RAW's preview covers it, as it covers a thumbnail).
    seen = decode_for_budget(path.read_bytes(), factor=2, min_pixels=4, max_pixels=200 * 150)
    assert made.format == "JPEG" and max(made.size) == min(256, max(upright_header_size(path.read_bytes())))
    assert abs(made.width / made.height - seen.width / seen.height) < 0.05  # upright, as the worker turns it
    assert all(abs(a - b) < 8 for a, b in zip(_mean(made), _mean(seen), strict=True)), (_mean(made), _mean(seen))


def test_a_raw_thumbnail_is_its_embedded_preview_not_a_demosaic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A camera's preview (here 256 x 192) covers a thumbnail: no RAW is demosaiced for a page view."""
    from preprocessing.formats import raw

    def demosaic(*args: object, **kwargs: object) -> Image.Image:
        raise AssertionError("demosaiced")

    monkeypatch.setattr(raw, "_demosaic", demosaic)
    path = format_album(tmp_path)["camera.dng"]
    made = Image.open(io.BytesIO(thumbnail_jpeg(str(path), allowed_roots=[tmp_path], max_bytes=1 << 24, size=256)))
    assert made.size == (256, 192)
