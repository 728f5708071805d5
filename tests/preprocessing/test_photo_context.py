"""The context block's fixed format: one line a fact in the table's order, missing facts left out, the album
relative to the innermost root, nothing for a source without a folder."""

from __future__ import annotations

from pathlib import Path

from preprocessing.photo_context import PROVIDERS, Photo, context_block

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
    assert list(PROVIDERS) == ["date", "place", "camera", "album", "filename"]
