"""Thumbnails (``api.thumbnails``) read only inside the roots they are given, the job's tenant's: another tenant's
photo under the same global root gives none, cached or not."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from api.thumbnails import Thumbnailer
from vlbatch.settings import Settings


def test_a_thumbnail_is_made_only_inside_the_given_roots(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    Image.new("RGB", (600, 400), (200, 30, 30)).save(root / "b" / "theirs.png")
    settings = Settings(allowed_input_roots=[root], data_dir=tmp_path / "data", thumbnail_processes=1)
    inputs = {"images": [str(root / "b" / "theirs.png")]}
    thumbs = Thumbnailer(settings)
    try:
        assert thumbs.path(job_id="j", item_id=1, inputs=inputs, roots=[root / "a"]) is None
        assert not (tmp_path / "data" / "thumbs").exists()  # nothing decoded, nothing cached
        made = thumbs.path(job_id="j", item_id=1, inputs=inputs, roots=[root / "b"])
        assert isinstance(made, Path) and made.exists()
        assert thumbs.path(job_id="j", item_id=1, inputs=inputs, roots=[root / "a"]) is None  # cached
        climbing = {"images": [f"{root}/a/../b/theirs.png"]}
        assert thumbs.path(job_id="j", item_id=2, inputs=climbing, roots=[root / "a"]) is None
    finally:
        thumbs.close()
