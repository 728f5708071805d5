"""The tagging option ``context`` where the worker builds an item's requests: the first photo's facts (read from
its header as it is decoded) go into the prompt as one fixed-format block, and its place comes from its GPS
position only when the job keeps GPS positions (``photo_gps``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.runtime.config import EngineConfig
from pipelines.image_tagging import PIPELINE
from preprocessing import photo_context
from tests.support.scripted import CHAT, scripted_runner
from vlbatch.db.tenants import global_roots
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.image_prep import Prepared, build_requests

IPHONE = Path(__file__).parents[1] / "preprocessing" / "fixtures" / "pillow_heif" / "iphone-xs.heic"
ALL = ["date", "place", "camera", "album", "keywords", "filename"]


def _prepared(tmp_path: Path, options: dict[str, object], *, sidecar: bytes = b"", mark: str = "AI") -> Prepared:
    root = tmp_path / "photos"
    photo = root / "2021" / "Kherson trip" / IPHONE.name
    photo.parent.mkdir(parents=True)
    shutil.copy(IPHONE, photo)
    if sidecar:
        photo.with_name(photo.name + ".xmp").write_bytes(sidecar)
    settings = Settings(allowed_input_roots=[root], xmp_keyword_root=mark)
    ctx = WorkerContext(
        settings=settings,
        sessions=None,  # type: ignore[arg-type]  # building requests reads no database
        runner=scripted_runner([], [], EngineConfig(model="scripted")),
        model_name="m",
        chat=CHAT,
    )
    return build_requests(
        ctx,
        PIPELINE,
        PIPELINE.options(options),
        item_id=1,
        attempt=0,
        sources=[str(photo)],
        roots=global_roots(settings),
    )


def test_the_prompt_holds_the_photos_context_block(tmp_path: Path) -> None:
    prepared = _prepared(tmp_path, {"context": ALL, "photo_gps": True})
    (request,) = prepared.requests
    block = (
        "Photo context:\n"
        "- date: 2021-07-06 16:08\n"
        "- place: Nova Kakhovka, Ukraine\n"
        "- camera: Apple iPhone XS\n"
        "- album: 2021/Kherson trip\n"
        "- filename: iphone-xs.heic\n\n"
        "Give up to 10 short tags"
    )
    assert block in request.prompt
    # asked again, the same block and the instruction after the question
    (again,) = prepared.again("Answer in German.")
    assert block in again.prompt and again.prompt.index("Give up to") < again.prompt.index("Answer in German.")
    assert again.images == request.images


def test_without_photo_gps_no_position_reaches_the_place_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(latitude: float, longitude: float) -> None:
        raise AssertionError("a GPS position was looked up without photo_gps")

    monkeypatch.setattr(photo_context, "place_of", never)
    prepared = _prepared(tmp_path, {"context": ALL})
    (request,) = prepared.requests
    assert "- date: 2021-07-06 16:08\n- camera: Apple iPhone XS\n" in request.prompt
    assert "place" not in request.prompt
    assert "gps" not in prepared.photos[0]


def test_no_context_asked_no_block(tmp_path: Path) -> None:
    (request,) = _prepared(tmp_path, {"photo_gps": True}).requests
    assert "Photo context" not in request.prompt


def test_the_photos_own_keywords_are_told_and_vlbatchs_are_not(tmp_path: Path) -> None:
    """A Lightroom-style sidecar beside the photo: a person's keywords and vlbatch's earlier ones under the mark the
    worker is set to (``VLBATCH_XMP_KEYWORD_ROOT``); only the person's reach the prompt."""
    sidecar = (
        b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
        b'<rdf:Description xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:lr="http://ns.adobe.com/lightroom/1.0/">'
        b"<dc:subject><rdf:Bag><rdf:li>Dnipro</rdf:li><rdf:li>river</rdf:li><rdf:li>Tagger</rdf:li>"
        b"<rdf:li>boat</rdf:li></rdf:Bag></dc:subject>"
        b"<lr:hierarchicalSubject><rdf:Bag><rdf:li>Places|Dnipro</rdf:li><rdf:li>Tagger|river</rdf:li>"
        b"</rdf:Bag></lr:hierarchicalSubject></rdf:Description></rdf:RDF></x:xmpmeta>"
    )
    (request,) = _prepared(tmp_path, {"context": ["keywords"]}, sidecar=sidecar, mark="Tagger").requests
    assert "Photo context:\n- keywords: Dnipro, boat\n\n" in request.prompt
    (request,) = _prepared(tmp_path / "other", {"context": ["keywords"]}, sidecar=sidecar, mark="AI").requests
    assert "- keywords: Dnipro, river, boat\n" in request.prompt  # under another mark "Tagger|river" is a person's
