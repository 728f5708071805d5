"""A job's exports written by ``vlbatch tag --out`` (``jobs.exports.files.write_export``) are
the API's exports of the same job, byte for byte: JSONL, CSV and Parquet, over a job that mixes photos, a video clip
and a failed item, on SQLite and PostgreSQL. The XMP sidecars carry the tags and captions the API answers with."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq

from api.main import create_app
from jobs.exports.columns import FIXED
from jobs.exports.files import write_export
from jobs.exports.xmp import sidecar_path, write_job_sidecars
from tests.support.ledger import finished_job
from vlbatch.settings import Settings

SEGMENTS = [
    {"start_s": 0.0, "end_s": 2.0, "frame_times": [0.0, 1.0], "tags": ["beach"], "caption": "Waves"},
    {"start_s": 2.0, "end_s": 4.0, "frame_times": [2.0, 3.0], "tags": ["sunset"], "caption": None},
]


def _mixed_job(db_url: str, album: Path) -> tuple[Any, str]:
    """A photo first (its answer has no ``segments``), a clip (its answer has), a failed photo, another photo."""
    return finished_job(
        db_url,
        [
            ({"images": [str(album / "a.jpg")]}, {"tags": ["sea", "boat"], "caption": "A boat, ünïcode"}),
            (
                {"images": [str(album / "clip.mp4")]},
                {"tags": ["beach", "sunset"], "caption": "Waves", "segments": SEGMENTS},
            ),
            ({"images": [str(album / "broken.jpg")]}, None),
            ({"images": [str(album / "b.jpg")]}, {"tags": ["=1+1"], "caption": "-minus\nnew line"}),
        ],
    )


def test_the_cli_and_the_api_export_the_same_bytes(
    db_url: str, tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    factory, job_id = _mixed_job(db_url, tmp_path / "album")
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="m")
    key = api_key.make(db_url)
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, headers=api_key.header(key)) as client:
        api = {fmt: client.get(f"/v1/jobs/{job_id}/results.{fmt}") for fmt in ("jsonl", "csv", "parquet")}
        page = client.get(f"/v1/jobs/{job_id}/results").json()["data"]
    assert all(r.status_code == 200 for r in api.values())

    cli = {}
    for fmt in ("jsonl", "csv", "parquet"):
        out = tmp_path / "out" / f"r.{fmt}"
        assert write_export(factory, job_id, out) == 4
        cli[fmt] = out.read_bytes()
    assert cli["jsonl"] == api["jsonl"].content
    assert cli["csv"] == api["csv"].content
    assert (
        pq.read_table(io.BytesIO(cli["parquet"])).to_pylist()
        == pq.read_table(io.BytesIO(api["parquet"].content)).to_pylist()
    )

    # The JSONL lines are the API's result objects; the CSV has the documented columns, one row per item.
    lines = [json.loads(line) for line in cli["jsonl"].decode().splitlines()]
    assert sorted(lines, key=lambda r: r["seq"]) == sorted(page, key=lambda r: r["seq"])
    assert [r["status"] for r in lines] == ["succeeded", "succeeded", "failed", "succeeded"]
    assert lines[1]["output"]["segments"] == SEGMENTS and lines[2]["error_code"] == "decode_error"
    rows = list(csv.DictReader(io.StringIO(cli["csv"].decode(), newline="")))
    assert tuple(rows[0]) == FIXED
    assert [r["tags"] for r in rows] == ["sea;boat", "beach;sunset", "", "'=1+1"]
    assert [r["caption"] for r in rows] == ["A boat, ünïcode", "Waves", "", "'-minus\nnew line"]
    assert json.loads(rows[1]["output"])["segments"] == SEGMENTS and rows[2]["error_code"] == "decode_error"
    table = pq.read_table(io.BytesIO(cli["parquet"])).to_pylist()
    assert [r["tags"] for r in table] == [[t["tag"] for t in line["tags"]] if line["tags"] else None for line in lines]

    # The sidecars (`vlbatch xmp`) carry the same tags and captions.
    with factory() as s:
        report = write_job_sidecars(s, job_id=job_id, out_dir=tmp_path / "xmp", relative_to=tmp_path / "album")
    assert (report.written, report.skipped_failed) == (3, 1)
    clip = sidecar_path(tmp_path / "album" / "clip.mp4", out_dir=tmp_path / "xmp", relative_to=tmp_path / "album")
    packet = clip.read_text()
    assert "<rdf:li>beach</rdf:li>" in packet and "<rdf:li>sunset</rdf:li>" in packet and "Waves" in packet


def test_a_csv_over_a_photo_then_a_clip_has_every_row(tmp_path: Path) -> None:
    """``vlbatch tag DIR --out r.csv`` over a folder whose first item is a photo and which holds a clip: the header
    comes from the columns, not from the first row (which has no ``segments``), so the clip's row is written too
    instead of a ValueError after the whole job has run."""
    factory, job_id = _mixed_job(f"sqlite:///{tmp_path / 'r.db'}", tmp_path / "album")
    out = tmp_path / "r.csv"
    assert write_export(factory, job_id, out) == 4
    with out.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["ref"] for r in rows] == ["r0", "r1", "r2", "r3"]
    assert [r["status"] for r in rows] == ["succeeded", "succeeded", "failed", "succeeded"]
    assert json.loads(rows[1]["output"])["segments"] == SEGMENTS
