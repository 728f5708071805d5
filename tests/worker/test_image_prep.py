"""An image item's photo facts: read from each image's header where it is decoded, one per image in the item's
order in its result, the GPS position only when the job's options ask for it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.runtime.requests import GenerationRequest, GenerationResult
from engine.vision import VisionGeometry
from pipelines.image_tagging import PIPELINE, TaggingOptions
from vlbatch.db.tenants import global_roots
from vlbatch.settings import Settings
from worker.image_prep import photo_facts, prepare_images
from worker.rounds import parse_answers

IPHONE = Path(__file__).parents[1] / "preprocessing" / "fixtures" / "pillow_heif" / "iphone-xs.heic"
HOPPER = Path(__file__).parents[1] / "preprocessing" / "fixtures" / "pillow" / "hopper_orientation_6.jpg"


def _images(tmp_path: Path) -> list[object]:
    for src in (IPHONE, HOPPER):
        shutil.copy(src, tmp_path / src.name)
    settings = Settings(allowed_input_roots=[tmp_path])
    return prepare_images(
        [str(tmp_path / IPHONE.name), str(tmp_path / HOPPER.name)],
        geometry=VisionGeometry(),
        settings=settings,
        roots=global_roots(settings),
        max_visual_tokens=64,
        limit=4,
    )


@pytest.mark.parametrize("keep_gps", [False, True])
def test_facts_of_each_image_in_order_gps_only_when_asked(tmp_path: Path, keep_gps: bool) -> None:
    iphone, hopper = photo_facts(_images(tmp_path), keep_gps=keep_gps)
    assert iphone["make"] == "Apple" and iphone["taken_at"] == "2021-07-06T16:08:14+03:00"
    assert hopper["orientation"] == 6 and hopper["make"] is None
    if keep_gps:
        assert iphone["gps"] == {"latitude": 46.7547028, "longitude": 33.3361056, "altitude": 7.69}
    else:
        assert "gps" not in iphone and "gps" not in hopper


def test_the_engine_gets_images_without_the_facts(tmp_path: Path) -> None:
    images = _images(tmp_path)
    photo_facts(images, keep_gps=False)
    assert all("photo" not in img.info for img in images)  # type: ignore[attr-defined]


def test_the_tagging_option_asks_for_gps_and_is_off_by_default() -> None:
    assert PIPELINE.photo_gps(TaggingOptions()) is False
    assert PIPELINE.photo_gps(PIPELINE.options({"photo_gps": True})) is True


def test_an_image_items_result_holds_its_photos_facts() -> None:
    opts = TaggingOptions()
    request = GenerationRequest(request_id="item-1-0-0", prompt="p", max_tokens=8)
    answer = GenerationResult("item-1-0-0", json.dumps({"tags": ["dog"]}), 10, 3, "stop")
    photos = [{"make": "Apple", "width": 1025, "height": 900}]
    outcome = parse_answers(PIPELINE, opts, 1, "job", [request], [answer], photos=photos)
    assert outcome.output == {"tags": ["dog"], "photos": photos}
    bare = parse_answers(PIPELINE, opts, 1, "job", [request], [answer])
    assert bare.output == {"tags": ["dog"]}
