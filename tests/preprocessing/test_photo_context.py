"""The context block's fixed format: one line a fact in the table's order, missing facts left out, the album
relative to the innermost root, nothing for a source without a folder."""

from __future__ import annotations

import os
from pathlib import Path

from preprocessing.photo_context import PROVIDERS, Photo, context_block

LIBRARY = Path(__file__).resolve().parents[1] / "fixtures" / "sidecars"  # digiKam, Lightroom, embedded: README
NIKON = {"taken_at": "2013-09-11T16:45:13", "make": "NIKON CORPORATION", "model": "NIKON D800", "gps": None}


def test_lines_come_in_the_tables_order_whatever_the_order_asked() -> None:
    photo = Photo("/photos/2013/Alps/DSC_0001.JPG", NIKON, [Path("/photos")])
    block = context_block(["filename", "camera", "date", "album"], photo)
    assert block == (
        "Photo context:\n- date: 2013-09-11 16:45\n- camera: NIKON D800\n- album: 2013/Alps\n- filename: DSC_0001.JPG"
    )


def test_missing_facts_are_left_out_and_no_fact_is_no_block() -> None:
    at_root = Photo("/photos/a.jpg", {"make": None, "model": None}, [Path("/photos")])
    assert context_block(["album", "camera", "place", "date"], at_root) == ""
    assert context_block(["filename"], at_root) == "Photo context:\n- filename: a.jpg"
    inline = Photo("data:image/png;base64,AAAA", NIKON, [Path("/photos")])
    assert context_block(["album", "filename"], inline) == ""


def test_the_album_is_below_the_innermost_root_and_values_are_cut() -> None:
    photo = Photo("/photos/family/2020/x.jpg", {}, [Path("/photos"), Path("/photos/family")])
    assert context_block(["album"], photo) == "Photo context:\n- album: 2020"
    long = Photo("/p/x.jpg", {"make": "A", "model": "B" * 200}, [])
    assert len(context_block(["camera"], long).splitlines()[1]) == len("- camera: ") + 80


def test_the_table_names_the_facts_the_option_accepts() -> None:
    assert list(PROVIDERS) == ["date", "place", "camera", "album", "keywords", "filename"]


def test_keywords_are_the_librarys_own_read_inside_the_roots_only(tmp_path: Path) -> None:
    """A digiKam sidecar's keywords are told; vlbatch's own (under the mark) are not; a sidecar that links out of
    the job's roots is not read, and the photo's embedded keywords speak instead."""
    album = tmp_path / "album"
    album.mkdir()
    (album / "harbour.jpg").write_bytes((LIBRARY / "embedded" / "market.jpg").read_bytes())
    outside = tmp_path / "elsewhere.xmp"
    outside.write_bytes((LIBRARY / "digikam" / "harbour.jpg.xmp").read_bytes())
    photo = Photo(str(album / "harbour.jpg"), {}, [album])

    assert context_block(["keywords"], photo) == "Photo context:\n- keywords: market, fruit, Fès"  # embedded
    (album / "harbour.jpg.xmp").symlink_to(outside)
    assert context_block(["keywords"], photo) == "Photo context:\n- keywords: market, fruit, Fès"  # link out: unread
    assert context_block(["keywords"], Photo(photo.source, {}, [tmp_path])) == (
        "Photo context:\n- keywords: Bergen, boat, harbour"  # inside these roots it is the library's sidecar
    )
    (album / "harbour.jpg.xmp").unlink()
    (album / "harbour.jpg.xmp").write_bytes(_marked_sidecar("AI", ["sunset"], ["Grandma"]))
    assert context_block(["keywords"], photo) == "Photo context:\n- keywords: Grandma"
    assert context_block(["keywords"], Photo(photo.source, {}, [album], mark="Machine")) == (
        "Photo context:\n- keywords: sunset, Grandma"  # another mark: AI|sunset is a person's tree now
    )
    assert context_block(["keywords"], Photo(photo.source, {}, [album], read_keywords=False)) == ""


def test_keywords_are_whole_and_a_fifo_named_like_a_sidecar_never_stalls(tmp_path: Path) -> None:
    many = [f"keyword number {i}" for i in range(20)]
    (tmp_path / "a.jpg").write_bytes(b"\xff\xd8\xff\xd9")
    (tmp_path / "a.jpg.xmp").write_bytes(_marked_sidecar("AI", [], many))
    line = context_block(["keywords"], Photo(str(tmp_path / "a.jpg"), {}, [tmp_path])).splitlines()[1]
    told = line.removeprefix("- keywords: ").split(", ")
    assert told == many[: len(told)] and 0 < len(line) - len("- keywords: ") <= 80

    (tmp_path / "a.jpg.xmp").unlink()
    os.mkfifo(tmp_path / "a.jpg.xmp")  # no writer: opening it for reading the usual way would block for ever
    os.mkfifo(tmp_path / "b.jpg")
    assert context_block(["keywords"], Photo(str(tmp_path / "a.jpg"), {}, [tmp_path])) == ""
    assert context_block(["keywords", "filename"], Photo(str(tmp_path / "b.jpg"), {}, [tmp_path])) == (
        "Photo context:\n- filename: b.jpg"
    )


def _marked_sidecar(mark: str, machine: list[str], human: list[str]) -> bytes:
    """A digiKam-style sidecar: ``machine`` under ``mark`` in the tree and flat beside it, ``human`` flat."""
    items = "".join(f"<rdf:li>{k}</rdf:li>" for k in [*machine, *human])
    trees = "".join(f"<rdf:li>{mark}/{k}</rdf:li>" for k in machine) + "".join(f"<rdf:li>{k}</rdf:li>" for k in human)
    return (
        '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
        '<rdf:Description xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:digiKam="http://www.digikam.org/ns/1.0/">'
        f"<dc:subject><rdf:Bag>{items}</rdf:Bag></dc:subject>"
        f"<digiKam:TagsList><rdf:Seq>{trees}</rdf:Seq></digiKam:TagsList>"
        "</rdf:Description></rdf:RDF></x:xmpmeta>"
    ).encode()
