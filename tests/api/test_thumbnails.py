"""Thumbnails (``api.thumbnails``) read only inside the roots they are given, the job's tenant's: another tenant's
photo under the same global root gives none, cached or not. A file no decoder reads, or whose decoder crashes or
hangs in its child, gives its code (``NoThumbnail``), and the next file its thumbnail."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from api import thumbnails
from api.thumbnails import NoThumbnail, Thumbnailer, placeholder_jpeg
from tests.support import decode_faults
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(180)


def test_a_thumbnail_is_made_only_inside_the_given_roots(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    Image.new("RGB", (600, 400), (200, 30, 30)).save(root / "b" / "theirs.png")
    settings = Settings(allowed_input_roots=[root], data_dir=tmp_path / "data", thumbnail_processes=1)
    inputs = {"images": [str(root / "b" / "theirs.png")]}
    outside = NoThumbnail("outside_roots", readable=False)
    thumbs = Thumbnailer(settings)
    try:
        assert thumbs.path(job_id="j", item_id=1, inputs=inputs, roots=[root / "a"]) == outside
        assert not (tmp_path / "data" / "thumbs").exists()  # nothing decoded, nothing cached
        made = thumbs.path(job_id="j", item_id=1, inputs=inputs, roots=[root / "b"])
        assert isinstance(made, Path) and made.exists()
        assert thumbs.path(job_id="j", item_id=1, inputs=inputs, roots=[root / "a"]) == outside  # cached
        climbing = {"images": [f"{root}/a/../b/theirs.png"]}
        assert thumbs.path(job_id="j", item_id=2, inputs=climbing, roots=[root / "a"]) == outside
        url = {"images": ["https://example.com/a.jpg"]}
        assert thumbs.path(job_id="j", item_id=3, inputs=url, roots=[root / "b"]) == NoThumbnail(
            "unsupported_source", readable=False
        )
    finally:
        thumbs.close()


def test_a_file_no_decoder_reads_or_that_kills_its_decoder_gets_its_code_and_the_next_file_its_thumbnail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    album = tmp_path / "album"
    album.mkdir()
    Image.new("RGB", (640, 480), (30, 120, 40)).save(album / "good.jpg")
    # A HEIC's signature over bytes libheif cannot read, and a drawing format no worker decoder reads.
    (album / "garbage.heic").write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x07" * 4000)
    (album / "drawing.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>')
    settings = Settings(
        allowed_input_roots=[album], data_dir=tmp_path / "data", thumbnail_processes=1, image_decode_timeout_s=10
    )
    thumbs = Thumbnailer(settings)

    def thumb(item_id: int, name: str) -> Path | NoThumbnail:
        made = thumbs.path(job_id="j", item_id=item_id, inputs={"images": [str(album / name)]}, roots=[album])
        assert made is not thumbnails.BUSY
        return made  # type: ignore[return-value]

    try:
        assert thumb(1, "garbage.heic") == NoThumbnail("decode_error", readable=True)
        assert thumb(2, "drawing.svg") == NoThumbnail("unsupported_format", readable=True)
        with monkeypatch.context() as hostile:  # what a decoder does on a file built to break it
            hostile.setattr(thumbnails, "thumbnail_jpeg", decode_faults.segfault)
            assert thumb(3, "good.jpg") == NoThumbnail("decode_crashed", readable=True)
            hostile.setattr(thumbnails, "thumbnail_jpeg", decode_faults.hang)
            assert thumb(4, "good.jpg") == NoThumbnail("decode_timeout", readable=True)
        made = thumb(5, "good.jpg")  # a new child; the API's own process never held the pixels
        assert isinstance(made, Path) and Image.open(made).size == (256, 192)
        cache = tmp_path / "data" / "thumbs" / "j"
        assert sorted(p.name for p in cache.glob("*.err")) == ["1.err", "2.err", "3.err"]  # a timeout may be load

        def no_decode(*args: object, **kwargs: object) -> object:
            raise AssertionError("a failure kept beside the thumbnails is not decoded again")

        monkeypatch.setattr(thumbs._sandbox, "call", no_decode)
        assert thumb(1, "garbage.heic") == NoThumbnail("decode_error", readable=True)
    finally:
        thumbs.close()


def test_the_placeholder_is_a_jpeg_naming_its_code() -> None:
    tile = Image.open(io.BytesIO(placeholder_jpeg("unsupported_format")))
    assert tile.format == "JPEG" and tile.size == (256, 192)
    # Red text on grey: the code is drawn, not an empty tile.
    assert any(r > 150 and g < 100 for r, g, _ in tile.convert("RGB").getdata())


def test_a_file_that_inflates_past_the_decoders_cap_gets_decode_memory_and_a_new_child_the_next(tmp_path: Path) -> None:
    """330 KB of deflated TIFF that decode to 192 MB of pixels, within the pixel guard: a decompression bomb only
    the decoder child's address-space cap stops. Its child is replaced, so the next file decodes in a fresh heap."""
    album = tmp_path / "album"
    album.mkdir()
    side = 8000  # 64 megapixels, the guard's own limit; written by another process, as the API never holds them
    bomb_file = album / "bomb.tiff"
    image = f"Image.new('RGB', ({side}, {side}))"
    code = f"from PIL import Image; {image}.save({str(bomb_file)!r}, compression='tiff_deflate')"
    subprocess.run([sys.executable, "-c", code], check=True)
    Image.new("RGB", (640, 480), (30, 120, 40)).save(album / "good.jpg")
    settings = Settings(
        allowed_input_roots=[album],
        data_dir=tmp_path / "data",
        thumbnail_processes=1,
        image_decode_memory_mb=320,
        image_decode_timeout_s=120,
    )
    thumbs = Thumbnailer(settings)
    try:
        bomb = thumbs.path(job_id="j", item_id=1, inputs={"images": [str(bomb_file)]}, roots=[album])
        assert bomb == NoThumbnail("decode_memory", readable=True)
        good = thumbs.path(job_id="j", item_id=2, inputs={"images": [str(album / "good.jpg")]}, roots=[album])
        assert isinstance(good, Path) and Image.open(good).size == (256, 192)
    finally:
        thumbs.close()


def test_a_clip_shows_its_middle_frame_and_a_broken_one_its_video_code(tmp_path: Path) -> None:
    from tests.support.clips import clip

    album = tmp_path / "album"
    album.mkdir()
    clip(album / "walk.mp4", seconds=6, scenes=3)  # flat colours two seconds each, a white bar moving down
    (album / "cut.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x01" * 500)
    thumbs = Thumbnailer(Settings(allowed_input_roots=[album], data_dir=tmp_path / "data", thumbnail_processes=1))
    try:
        made = thumbs.path(job_id="j", item_id=1, inputs={"images": [str(album / "walk.mp4")]}, roots=[album])
        assert isinstance(made, Path)
        frame = Image.open(made)
        assert frame.format == "JPEG" and max(frame.size) <= 256 and frame.width > frame.height
        # The middle of the clip is its second scene: colour (70, 170, 195) in tests.support.clips, under the bar.
        r, g, b = frame.convert("RGB").getpixel((frame.width // 2, frame.height - 5))  # type: ignore[misc]
        assert abs(r - 70) < 20 and abs(g - 170) < 20 and abs(b - 195) < 20, (r, g, b)
        broken = thumbs.path(job_id="j", item_id=2, inputs={"images": [str(album / "cut.mp4")]}, roots=[album])
        assert broken == NoThumbnail("video_decode_error", readable=True)
    finally:
        thumbs.close()
