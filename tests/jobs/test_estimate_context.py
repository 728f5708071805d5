"""A dry run counts the tagging option ``context``: each photo's block, made from the facts its header tells (a real
Nikon D800 JPEG's EXIF), is in the item's text tokens; a GPS position is read into it only with ``photo_gps``."""

from __future__ import annotations

import shutil
from pathlib import Path

from PIL import Image

from jobs.request import JobRequest
from jobs.submit import dry_run
from pipelines import image_tagging
from preprocessing.photo_context import Photo, context_block
from vlbatch.db import job_store
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

SIDECAR = Path(__file__).parents[1] / "fixtures" / "sidecars" / "digikam" / "harbour.jpg.xmp"
NIKON = Path(__file__).parents[1] / "preprocessing" / "fixtures" / "pillow" / "broken_exif_dpi.jpg"


def _tokens(text: str) -> int:
    return -(-len(text) // 4)  # the dry run's count without a tokenizer: about four characters a token


def _gps_jpeg(path: Path, latitude: float, longitude: float) -> None:
    """A JPEG whose EXIF holds a GPS position, as a phone writes it (degrees, minutes, seconds and their refs)."""
    exif = Image.Exif()
    gps = exif.get_ifd(0x8825)

    def dms(value: float) -> tuple[float, float, float]:
        degrees = int(abs(value))
        minutes = int((abs(value) - degrees) * 60)
        return (degrees, minutes, round((abs(value) - degrees - minutes / 60) * 3600, 4))

    gps.update(
        {1: "N" if latitude >= 0 else "S", 2: dms(latitude), 3: "E" if longitude >= 0 else "W", 4: dms(longitude)}
    )
    Image.new("RGB", (64, 48), (90, 120, 60)).save(path, exif=exif.tobytes())


def _count(db_url: str, root: Path, paths: list[str], options: dict[str, object], **settings: int) -> list[int]:
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    request = JobRequest(
        pipeline=image_tagging.NAME,
        options=options,
        items=job_store.items_from_paths(paths, images_per_prompt=1),
        model="m",
    )
    with sessions() as s:
        estimate = dry_run(s, Settings(allowed_input_roots=[root], **settings), request)
    assert estimate.text_tokens == sum(t.text_tokens for t in estimate.per_item)
    return [t.text_tokens for t in estimate.per_item]


def test_context_tokens_are_in_the_dry_runs_count(db_url: str, tmp_path: Path) -> None:
    root = tmp_path / "photos"
    nikon = root / "2013" / "Alps" / "DSC_0001.jpg"
    nikon.parent.mkdir(parents=True)
    shutil.copy(NIKON, nikon)
    plain = _count(db_url, root, [str(nikon)], {})
    asked = ["date", "camera", "album", "filename"]
    with_context = _count(db_url, root, [str(nikon)], {"context": asked})
    block = (
        "Photo context:\n- date: 2013-09-11 16:45\n- camera: NIKON D800\n- album: 2013/Alps\n- filename: DSC_0001.jpg"
    )
    assert (
        context_block(asked, Photo(str(nikon), {"taken_at": "2013-09-11T16:45:13", "model": "NIKON D800"}, [root]))
        == block
    )
    assert with_context == [plain[0] + _tokens(block + "\n\n")]


def test_a_place_is_counted_only_with_photo_gps(db_url: str, tmp_path: Path) -> None:
    root = tmp_path / "photos"
    root.mkdir()
    photo = root / "eiffel.jpg"
    _gps_jpeg(photo, 48.8584, 2.2945)
    plain = _count(db_url, root, [str(photo)], {"photo_gps": True})
    no_gps = _count(db_url, root, [str(photo)], {"context": ["place"]})
    with_gps = _count(db_url, root, [str(photo)], {"context": ["place"], "photo_gps": True})
    assert no_gps == _count(db_url, root, [str(photo)], {})  # no position read: no block at all
    assert with_gps == [plain[0] + _tokens("Photo context:\n- place: Paris, France\n\n")]


def test_past_the_dry_runs_file_limit_no_header_is_read_for_facts(db_url: str, tmp_path: Path) -> None:
    root = tmp_path / "photos"
    root.mkdir()
    paths = [root / "a.jpg", root / "b.jpg"]
    for path in paths:
        shutil.copy(NIKON, path)
    first, second = _count(
        db_url, root, [str(p) for p in paths], {"context": ["date", "filename"]}, dry_run_max_files=1
    )
    plain = _count(db_url, root, [str(paths[0])], {})[0]
    assert first == plain + _tokens("Photo context:\n- date: 2013-09-11 16:45\n- filename: a.jpg\n\n")
    assert second == plain + _tokens("Photo context:\n- filename: b.jpg\n\n")  # its header was not read


def test_keywords_are_counted_and_not_read_past_the_file_limit(db_url: str, tmp_path: Path) -> None:
    root = tmp_path / "photos"
    root.mkdir()
    paths = [root / "a.jpg", root / "b.jpg"]
    for path in paths:
        shutil.copy(NIKON, path)
        shutil.copy(SIDECAR, path.with_name(path.name + ".xmp"))
    plain = _count(db_url, root, [str(paths[0])], {})[0]
    first, second = _count(db_url, root, [str(p) for p in paths], {"context": ["keywords"]}, dry_run_max_files=1)
    assert first == plain + _tokens("Photo context:\n- keywords: Bergen, boat, harbour\n\n")
    assert second == plain  # past the limit: neither its header nor its sidecar read, no block
