"""The Parquet export over real HTTP, on SQLite and PostgreSQL: read back with pyarrow, typed columns, one row
group per page read, the same rows as the JSONL export (tags edited by hand included)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from api.main import create_app
from jobs.exports.files import write_export
from jobs.exports.parquet import parquet_chunks
from tests.support.ledger import finished_job
from vlbatch.db.models import Item
from vlbatch.settings import Settings


def test_parquet_export_reads_back_as_the_jsonl_export(
    db_url: str, tmp_path: Path, redis_url: str, serve: type, api_key: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.routes import results

    monkeypatch.setattr(results, "EXPORT_PAGE_ROWS", 3)  # 7 rows: row groups of 3, 3 and 1
    outputs: list[dict[str, Any] | None] = [
        {"tags": ["sea", "boat"], "caption": "A boat, ünïcode"},
        None,
        {"tags": [], "caption": None},
        {"tags": ["forest"]},
        {"summary": "a document's answer, no tags"},
        None,
        {"tags": ["snow", "night"], "caption": "=1+1"},
    ]
    factory, job_id = finished_job(db_url, [({"images": [f"/{i}.jpg"]}, out) for i, out in enumerate(outputs)])
    with factory() as s:
        first = s.scalars(select(Item.id).where(Item.job_id == job_id).order_by(Item.seq)).first()
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="m")
    key = api_key.make(db_url)
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, headers=api_key.header(key)) as client:
        edit = client.patch(f"/v1/jobs/{job_id}/items/{first}/tags", json={"add": ["harbour"], "remove": ["sea"]})
        assert edit.status_code == 200, edit.text
        resp = client.get(f"/v1/jobs/{job_id}/results.parquet")
        lines = [json.loads(line) for line in client.get(f"/v1/jobs/{job_id}/results.jsonl").text.splitlines()]
        other = api_key.make(db_url, tenant="elsewhere")
        hidden = httpx.get(f"{srv.url}/v1/jobs/{job_id}/results.parquet", headers=api_key.header(other))
    assert hidden.status_code == 404 and hidden.json()["code"] == "job_not_found"
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/vnd.apache.parquet"

    parquet = pq.ParquetFile(io.BytesIO(resp.content))
    assert [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)] == [3, 3, 1]
    table = parquet.read()
    assert table.schema.field("tags").type == pa.list_(pa.string())
    assert table.schema.field("item_id").type == pa.int64() and table.schema.field("prompt_tokens").type == pa.int64()
    rows = table.to_pylist()
    assert len(rows) == len(lines) == 7
    for row, line in zip(rows, lines, strict=True):
        for column in ("item_id", "seq", "ref", "status", "error_code", "error_message", "raw_text"):
            assert row[column] == line[column], column
        for column in ("prompt_tokens", "completion_tokens", "model", "pipeline_version", "options_hash"):
            assert row[column] == line[column], column
        assert (json.loads(row["output"]) if row["output"] is not None else None) == line["output"]
        tags = line["tags"]
        assert row["tags"] == ([t["tag"] for t in tags] if tags is not None else None)
        assert row["tag_sources"] == ([t["source"] for t in tags] if tags is not None else None)
        caption = (line["output"] or {}).get("caption")
        assert row["caption"] == caption
    assert rows[0]["tags"] == ["boat", "harbour"] and rows[0]["tag_sources"] == ["model", "manual"]
    assert rows[2]["tags"] == [] and rows[4]["tags"] is None  # no tags given, and an output without a tag list
    assert rows[1]["status"] == "failed" and rows[1]["error_code"] == "decode_error" and rows[1]["tags"] is None

    # The file written by `vlbatch tag --out x.parquet` (jobs.exports.files.write_export) is the same writer's.
    path = tmp_path / "r.parquet"
    assert write_export(factory, job_id, path, page_size=4) == 7
    assert pq.read_table(path).to_pylist() == rows


def test_an_empty_export_is_a_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    path.write_bytes(b"".join(parquet_chunks([])))
    table = pq.read_table(path)
    assert table.num_rows == 0 and "tags" in table.schema.names
