"""The exports' row writers (``jsonl.jsonl_rows``, ``parquet.rows_batch``: a page of rows written a column at a time,
read ahead on PostgreSQL by ``vlbatch.db.row_stream``) make the record writers' bytes, over rows chosen to part them:
non-ASCII, astral and DEL characters, control characters, stored JSON that is not ``json.dumps``'s, ``\\u0000``,
results written before tags had sources, answers Arrow's JSON reader refuses, items without results; on SQLite and
PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from jobs.exports import parquet
from jobs.exports.files import JobExport, export_chunks
from vlbatch.db import job_store
from vlbatch.db.models import Item, Result
from vlbatch.db.results import iter_results
from vlbatch.db.session import make_engine, make_sessionmaker, migrate

PAGE = 4  # pages of plain rows between those the column writers cannot take

# (ref, status, error_code, error_message, output, tags, reused_from, prompt_hash); output/tags as stored JSON
# text (SQL NULL for None), "-" for an item without a result.
ROWS: list[tuple[Any, ...]] = [
    ("plain.jpg", "succeeded", None, None, {"tags": ["sea"], "caption": "a sea"}, "stored", None, "p0"),
    ("Été/ü €.jpg", "succeeded", None, None, {"tags": ["été", "😀"], "caption": "ünï 😀"}, "stored", 1, None),
    ("del\x7fref", "failed", "decode_error", 'bad\tbytes \x01 "q" \\ \n \u2028 🐟', "-", "-", None, None),
    ('r"0\\', "succeeded", None, None, {"caption": 7, "tags": "none"}, "stored", None, "p3"),
    ("legacy.jpg", "succeeded", None, None, {"tags": ["b", "a", "b", 3]}, None, None, None),  # tags merged in Python
    ("doc.pdf", "succeeded", None, None, {"summary": "s"}, None, None, None),  # no tag list: tags null
    ("newline.json", "succeeded", None, None, '{"caption": "x",\n "tags": []}', "stored", None, None),
    ("odd.json", "succeeded", None, None, '{"caption":"compact ü","tags":["q"]}', "stored", None, None),  # not dumps's
    ("nul.jpg", "succeeded", None, None, {"tags": ["x\u0000"], "caption": "a\u0000b"}, "stored", None, None),
    ("null-output", "succeeded", None, None, "SQL NULL", "json null", None, None),
    ("emoji-tag.jpg", "succeeded", None, None, {"tags": ["🌊"], "caption": None}, "stored", None, None),
    (None, "failed", "engine_error", None, "-", "-", None, None),
    ("string-answer.txt", "succeeded", None, None, '"just text"', None, None, None),  # an answer that is no object
]


def _tags(output: Any) -> str:
    names = output.get("tags") if isinstance(output, dict) else None
    names = names if isinstance(names, list) else []
    return json.dumps([{"tag": t, "source": "model", "by": None, "at": None} for t in names if isinstance(t, str)])


@pytest.fixture
def job(db_url: str) -> tuple[sessionmaker[Session], str]:
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    as_json = "CAST({} AS json)" if db_url.startswith("postgresql") else "{}"
    new = [job_store.NewItem(inputs={"images": [f"/a/{i}.jpg"]}, ref=row[0]) for i, row in enumerate(ROWS)]
    with factory() as s:
        job = job_store.create_job(s, pipeline="image_tagging", model="m", options={}, items=new, chunk_size=50)
        items = s.scalars(select(Item).where(Item.job_id == job.id).order_by(Item.seq)).all()
        for item, (_, status, code, message, output, tags, reused, phash) in zip(items, ROWS, strict=True):
            item.status, item.error_code, item.error_message = status, code, message
            if output == "-":
                continue
            s.add(Result(item_id=item.id, job_id=job.id, output=None, raw_text=f"raw {item.seq} ü", prompt_tokens=3,
                         completion_tokens=item.seq, model="m", model_revision=None, pipeline_version="1",
                         options_hash="h", reused_from=reused, prompt_hash=phash))  # fmt: skip
            s.flush()
            stored = {
                "output": None if output == "SQL NULL" else output if isinstance(output, str) else json.dumps(output),
                "tags": None if tags is None else "null" if tags == "json null" else _tags(
                    json.loads(output) if isinstance(output, str) and output != "SQL NULL" else output),
            }  # fmt: skip
            s.execute(
                text(
                    f"UPDATE results SET output = {as_json.format(':output')}, tags = {as_json.format(':tags')} "
                    "WHERE item_id = :i"
                ),
                {**stored, "i": item.id},
            )
        s.commit()
        return factory, job.id


def _by_records(factory: sessionmaker[Session], job_id: str, fmt: str) -> bytes:
    with factory() as s:
        return b"".join(export_chunks(fmt, iter_results(s, job_id=job_id, page_size=PAGE), pipeline="image_tagging"))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "csv"])
def test_the_row_writers_write_the_record_writers_bytes(job: tuple[sessionmaker[Session], str], fmt: str) -> None:
    factory, job_id = job
    with factory() as s:
        export = JobExport(fmt, s, job_id=job_id, pipeline="image_tagging", page_size=PAGE)
        written = b"".join(export)
    assert export.rows == len(ROWS)
    assert written == _by_records(factory, job_id, fmt)


def test_pages_of_plain_rows_are_made_without_records(
    job: tuple[sessionmaker[Session], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a page Arrow's JSON reader refuses is made from records: here the one with a caption that is a number
    (``{"caption": 7}``) and the last, with an answer that is a string."""
    factory, job_id = job
    made: list[int] = []
    real = parquet.record_batch
    monkeypatch.setattr(parquet, "record_batch", lambda page, *a: made.append(len(page)) or real(page, *a))
    with factory() as s:
        b"".join(JobExport("parquet", s, job_id=job_id, pipeline="image_tagging", page_size=PAGE))
    assert made == [PAGE, 1]


def test_an_export_left_after_its_first_page_closes_its_cursor_and_its_reader(
    job: tuple[sessionmaker[Session], str],
) -> None:
    import threading

    factory, job_id = job
    with factory() as s:
        chunks = iter(JobExport("jsonl", s, job_id=job_id, pipeline="image_tagging", page_size=PAGE))
        assert next(chunks).count(b"\n") == PAGE
        chunks.close()  # type: ignore[attr-defined]  # as a client that hung up
        assert not [t for t in threading.enumerate() if t.name == "row-stream"]
        if s.get_bind().dialect.name == "postgresql":
            assert s.connection().exec_driver_sql("SELECT count(*) FROM pg_cursors").scalar() == 0
        assert s.execute(select(Item.id).where(Item.job_id == job_id)).first() is not None  # the session still works
