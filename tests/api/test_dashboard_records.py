"""The dashboard's cards and tag filter read records (``vlbatch.db.results``): a card's tags are the record's, the
filter keeps the items with the tag, its choices count every result's tags, and an item without a result has none
and cannot be tagged; on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from api.routes import ui
from tests.support.ledger import finished_job


def test_cards_and_the_tag_filter_read_the_records(db_url: str, tmp_path: Path) -> None:
    factory, job_id = finished_job(
        db_url,
        [
            ({"images": [str(tmp_path / "a.jpg")]}, {"tags": ["sea", "boat"], "caption": "A boat"}),
            ({"images": [str(tmp_path / "broken.jpg")]}, None),
            ({"images": [str(tmp_path / "b.jpg")]}, {"tags": ["sea"], "caption": "Sea"}),
            ({"path": str(tmp_path / "notes.txt")}, {"summary": "no tag list"}),
        ],
    )
    with factory() as s:
        rows, more = ui._results(s, job_id, after=-1, tag=None, error=None)
        assert more is None
        assert [r["name"] for r in rows] == ["a.jpg", "broken.jpg", "b.jpg", "notes.txt"]
        assert [[t["tag"] for t in r["tags"]] for r in rows] == [["sea", "boat"], [], ["sea"], []]
        assert [r["editable"] for r in rows] == [True, False, True, False]
        assert [r["caption"] for r in rows] == ["A boat", None, "Sea", None]
        assert rows[1]["item"].error_code == "decode_error" and rows[1]["item"].status == "failed"

        sea, _ = ui._results(s, job_id, after=-1, tag="boat", error=None)
        assert [r["name"] for r in sea] == ["a.jpg"]
        assert ui._tag_counts(s, job_id) == [("sea", 2), ("boat", 1)]
