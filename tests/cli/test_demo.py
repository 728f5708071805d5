"""The demo album holds what a newcomer's album holds: a phone's HEIC, a camera's DNG and a JPEG that
libjpeg-turbo complains of but every viewer shows, besides JPEGs, PNGs and two files that are not images."""

from __future__ import annotations

from pathlib import Path

import simplejpeg

from cli.demo import write_sample_photos
from preprocessing.images import decode_for_budget
from preprocessing.input_errors import InputError
from vlbatch.inputs import IMAGE_SUFFIXES

BUDGET = {"factor": 28, "min_pixels": 4 * 28 * 28, "max_pixels": 64 * 28 * 28}


def test_the_album_has_a_heic_a_dng_and_a_damaged_jpeg_and_all_but_the_broken_decode(tmp_path: Path) -> None:
    paths = write_sample_photos(tmp_path, count=12)
    assert [p.suffix for p in paths[9:12]] == [".jpg", ".heic", ".dng"]
    assert all(p.suffix in IMAGE_SUFFIXES for p in paths)  # a folder job lists every one of them
    damaged = paths[9].read_bytes()
    try:
        simplejpeg.decode_jpeg(damaged, strict=True)
        raise AssertionError("the damaged JPEG decodes strictly: it shows nothing new")
    except ValueError:
        pass
    for path in paths[:12]:
        out = decode_for_budget(path.read_bytes(), **BUDGET)
        assert out.mode == "RGB" and out.info["photo"]["width"] > 0, path.name
    for path, code in zip(paths[12:], ("decode_error", "empty_file"), strict=True):
        try:
            decode_for_budget(path.read_bytes(), **BUDGET)
            raise AssertionError(f"{path.name} decoded")
        except InputError as err:
            assert err.code == code
