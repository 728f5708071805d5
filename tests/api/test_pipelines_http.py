"""Jobs of any registered pipeline through one route, and the registry as the API shows it (real HTTP)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.main import create_app
from pipelines import registry
from vlbatch.settings import Settings


@pytest.fixture
def api(tmp_path: Path, redis_url: str, serve: type, api_key: type) -> Iterator[tuple[httpx.Client, Path]]:
    root = tmp_path / "inbox"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nSome text.\n")
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'api.db'}",
        broker_url=redis_url,
        model_name="tiny",
        chunk_size=5,
        document_chunk_size=1,
        allowed_input_roots=[root, Path("/x")],  # /x: the inline items' paths, never read here
    )
    headers = api_key.header(api_key.make(settings.database.database_url))
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30, headers=headers) as c:
        yield c, root


def test_pipelines_are_listed_from_the_registry(api: tuple[httpx.Client, Path]) -> None:
    client, _ = api
    listed = client.get("/v1/pipelines").json()
    assert [p["name"] for p in listed] == registry.names()
    tagging = next(p for p in listed if p["name"] == "image_tagging")
    assert tagging["kind"] == "image" and "max_tags" in tagging["options_schema"]["properties"]


def test_one_route_creates_jobs_of_either_kind(api: tuple[httpx.Client, Path]) -> None:
    client, root = api
    items = [{"images": [f"/x/{i}.jpg"], "ref": f"r{i}"} for i in range(12)]
    r = client.post("/v1/jobs", json={"pipeline": "image_tagging", "items": items, "options": {"max_tags": 4}})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["pipeline"] == "image_tagging" and job["total"] == 12 and job["priority"] == "batch"
    r = client.post("/v1/jobs", json={"pipeline": "summarize", "directory": str(root)})
    assert r.status_code == 201, r.text
    assert r.json()["priority"] == "documents" and r.json()["total"] == 1


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"pipeline": "no_such", "items": [{"images": ["/x/x.jpg"]}]}, "image_tagging"),
        ({"pipeline": "image_tagging", "items": [{"images": ["/x/x.jpg"]}], "options": {"max_tags": 0}}, "max_tags"),
        ({"pipeline": "summarize", "items": [{"images": ["/x/x.jpg"]}]}, "document pipeline"),
        ({"pipeline": "image_tagging", "items": [{"path": "/x.pdf"}]}, "image pipeline"),
    ],
)
def test_bad_jobs_are_refused_with_a_reason(
    api: tuple[httpx.Client, Path], body: dict[str, object], needle: str
) -> None:
    r = api[0].post("/v1/jobs", json=body)
    assert r.status_code == 422
    assert needle in r.text


def test_the_documents_route_refuses_an_image_pipeline(api: tuple[httpx.Client, Path]) -> None:
    client, root = api
    r = client.post("/v1/jobs/documents", json={"pipeline": "image_tagging", "directory": str(root)})
    assert r.status_code == 422 and "image pipeline" in r.text


def test_the_generic_route_sends_request_pipelines_to_batches(api: tuple[httpx.Client, Path]) -> None:
    client, _ = api
    r = client.post("/v1/jobs", json={"pipeline": "chat", "items": [{"messages": []}]})
    assert (r.status_code, r.json()["code"]) == (422, "wrong_pipeline_kind") and "/v1/batches" in r.json()["detail"]
