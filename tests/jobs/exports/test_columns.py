"""A pipeline's own columns (``Pipeline.flat_columns``) in the flat exports: named in the header before any row,
filled from each answer (text as it is, anything else as JSON), empty for an item without one; the columns every
job has cannot be declared again."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.exports.columns import FIXED, FlatColumns
from jobs.exports.csv_writer import csv_chunks
from jobs.exports.parquet import parquet_chunks
from pipelines import registry
from pipelines.image_tagging import ImageTagging
from vlbatch.db.results import ResultRecord


class MoodTagging(ImageTagging):
    name = "mood_tagging"
    flat_columns = ("mood", "scores", "caption")  # caption is a column of every job already


@pytest.fixture
def mood() -> Iterator[str]:
    registry.register(MoodTagging())
    try:
        yield MoodTagging.name
    finally:
        registry.unregister(MoodTagging.name)


def _record(seq: int, output: str | None) -> ResultRecord:
    has = output is not None
    return ResultRecord(
        seq + 1, seq, f"r{seq}", "succeeded" if has else "failed", None if has else "decode_error", None,
        has, output_text=output, prompt_tokens=1 if has else 0, completion_tokens=1 if has else 0,
        model="m" if has else None, pipeline_version="1" if has else None, options_hash="h" if has else None,
    )  # fmt: skip


PAGES = [
    [_record(0, '{"tags": ["a"], "caption": "c"}')],
    [_record(1, None), _record(2, '{"mood": "calm", "scores": [1, 2]}')],
]


def test_a_pipelines_columns_follow_the_fixed_ones(mood: str) -> None:
    flat = FlatColumns(mood)
    assert flat.names == ("mood", "scores")
    rows = list(csv.reader(io.StringIO(b"".join(csv_chunks(PAGES, flat)).decode(), newline="")))
    assert tuple(rows[0]) == (*FIXED, "mood", "scores")
    assert [r[-2:] for r in rows[1:]] == [["", ""], ["", ""], ["calm", "[1, 2]"]]

    table = pq.read_table(io.BytesIO(b"".join(parquet_chunks(PAGES, flat))))
    assert table.schema.names[-2:] == ["mood", "scores"] and table.schema.field("mood").type == pa.string()
    assert table.column("scores").to_pylist() == [None, None, "[1, 2]"]


def test_a_pipeline_without_columns_or_no_longer_registered_has_the_fixed_ones() -> None:
    assert (
        FlatColumns("image_tagging").names == () and FlatColumns("gone").names == () and FlatColumns(None).names == ()
    )
    header = next(csv_chunks([], FlatColumns("gone"))).decode()
    assert header == ",".join(FIXED) + "\r\n"
