"""CSV export and the 'refresh' re-run over real HTTP."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import update

from api.main import create_app
from pipelines import registry
from tests.support.ledger import finished_job
from vlbatch.db.models import Item, Job, Result
from vlbatch.settings import Settings


def _api(tmp_path: Path, redis_url: str) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'e.db'}", broker_url=redis_url, model_name="m")


def test_csv_export_has_tag_and_caption_columns_and_defuses_formulas(
    tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    settings = _api(tmp_path, redis_url)
    _, job_id = finished_job(
        settings.database.database_url,
        [
            ({"images": ["/a.jpg"]}, {"tags": ["sea", "boat"], "caption": '=HYPERLINK("http://x")'}),
            ({"images": ["/b.jpg"]}, None),
            ({"images": ["/c.jpg"]}, {"tags": ["@home"], "caption": "Plain, with a comma"}),
        ],
    )
    key = api_key.header(api_key.make(settings.database.database_url))
    with serve(create_app(settings)) as srv:
        resp = httpx.get(f"{srv.url}/v1/jobs/{job_id}/results.csv", headers=key)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(resp.text)))
    assert [r["status"] for r in rows] == ["succeeded", "failed", "succeeded"]
    assert rows[0]["tags"] == "sea;boat" and rows[0]["caption"] == '\'=HYPERLINK("http://x")'
    assert rows[1]["error_code"] == "decode_error" and rows[1]["tags"] == ""
    assert rows[2]["tags"] == "'@home" and rows[2]["caption"] == "Plain, with a comma"


def test_refresh_reruns_only_items_processed_with_something_else(
    tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    settings = _api(tmp_path, redis_url)
    items: list[tuple[dict[str, Any], dict[str, Any] | None]] = [
        ({"images": [f"/{i}.jpg"]}, {"tags": ["t"]}) for i in range(4)
    ]
    factory, job_id = finished_job(settings.database.database_url, [*items, ({"images": ["/bad.jpg"]}, None)])
    current = registry.get("image_tagging").version
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None
        ids = [i.id for i in s.query(Item).filter(Item.job_id == job_id).order_by(Item.seq)]
        # items 0 and 1 were made as the pipeline runs now; 2 by an older pipeline version; 3 by another model
        s.execute(update(Result).values(pipeline_version=current, options_hash=job.options_hash, model="m"))
        s.execute(update(Result).where(Result.item_id == ids[2]).values(pipeline_version="0.old"))
        s.execute(update(Result).where(Result.item_id == ids[3]).values(model="another-model"))
        s.execute(update(Result).where(Result.item_id == ids[1]).values(model_revision="rev-a"))
        s.commit()
    key = api_key.header(api_key.make(settings.database.database_url))
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, headers=key) as client:

        def refs(body: dict[str, Any]) -> list[str]:
            job = client.post(f"/v1/jobs/{job_id}/rerun", json=body)
            assert job.status_code == 201, job.text
            page = client.get(f"/v1/jobs/{job.json()['id']}/items", params={"limit": 100}).json()
            return [i["ref"] for i in page["data"]]

        assert refs({"scope": "refresh"}) == ["r2", "r3", "r4"]  # old version, other model, the failed one
        assert refs({"scope": "refresh", "model_revision": "rev-a"}) == ["r0", "r2", "r3", "r4"]
        assert refs({"scope": "missing"}) == ["r4"]
        bad = client.post(f"/v1/jobs/{job_id}/rerun", json={"scope": "everything"})
        assert bad.status_code == 422
