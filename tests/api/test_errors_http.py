"""Error answers over real HTTP: every refusal carries its registered code and status, and ``GET /v1/errors``
lists the registry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from api.main import create_app
from vlbatch.errors import CODES
from vlbatch.settings import Settings


@pytest.fixture
def app(tmp_path: Path, redis_url: str) -> FastAPI:
    root = tmp_path / "inbox"
    root.mkdir()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'api.db'}",
        broker_url=redis_url,
        model_name="tiny",
        allowed_input_roots=[root, Path("/x")],  # /x: the inline items' paths, never read here
        max_items_per_job=3,
    )
    return create_app(settings)


@pytest.fixture
def client(app: FastAPI, serve: type, api_key: type, tmp_path: Path) -> Iterator[httpx.Client]:
    headers = api_key.header(api_key.make(f"sqlite:///{tmp_path / 'api.db'}"))
    with serve(app) as srv, httpx.Client(base_url=srv.url, timeout=30, headers=headers) as c:
        yield c


def test_the_error_codes_are_listed_from_the_registry(client: httpx.Client) -> None:
    r = client.get("/v1/errors")
    assert r.status_code == 200
    listed = {e["code"]: e for e in r.json()}
    assert list(listed) == list(CODES)
    for code, entry in CODES.items():
        assert listed[code] == {
            "code": code,
            "meaning": entry.meaning,
            "retryable": entry.retryable,
            "http_status": entry.http_status,
            "used_in": [u for u in ("item", "api", "worker", "cli") if u in entry.used_in],
        }
    assert listed["fetch_error"]["retryable"] is True and listed["job_not_found"]["http_status"] == 404


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code", "needle"),
    [
        ("GET", "/v1/jobs/nope", None, 404, "job_not_found", "job 'nope' not found"),
        ("POST", "/v1/jobs/nope/rerun", {"scope": "all"}, 404, "job_not_found", "'nope'"),
        (
            "POST",
            "/v1/jobs",
            {"pipeline": "no_such", "items": [{"images": ["/x/x.jpg"]}]},
            422,
            "unknown_pipeline",
            "image_tagging",
        ),
        (
            "POST",
            "/v1/jobs",
            {"pipeline": "image_tagging", "items": [{"images": ["/x/x.jpg"]}], "options": {"max_tags": 0}},
            422,
            "invalid_options",
            "max_tags",
        ),
        (
            "POST",
            "/v1/jobs",
            {"pipeline": "summarize", "items": [{"images": ["/x/x.jpg"]}]},
            422,
            "invalid_items",
            "document pipeline",
        ),
        (
            "POST",
            "/v1/jobs/documents",
            {"pipeline": "image_tagging", "directory": "/"},
            422,
            "wrong_pipeline_kind",
            "image pipeline",
        ),
        (
            "POST",
            "/v1/jobs/tagging",
            {"directory": "/etc"},
            422,
            "input_path_refused",
            "outside the allowed input roots",
        ),
        (
            "POST",
            "/v1/jobs/tagging",
            {"items": [{"images": [f"/x/{i}.jpg"]} for i in range(4)]},
            422,
            "too_many_items",
            "limit of 3",
        ),
    ],
)
def test_a_refusal_answers_with_its_registered_status_and_code(
    client: httpx.Client, method: str, path: str, body: dict[str, object] | None, status: int, code: str, needle: str
) -> None:
    r = client.request(method, path, json=body)
    assert (r.status_code, r.json()["code"]) == (status, code), r.text
    assert CODES[code].http_status == status
    assert set(r.json()) == {"detail", "code"} and needle in r.json()["detail"]


def test_an_empty_folder_and_a_bad_cursor_have_their_codes(client: httpx.Client, app: FastAPI) -> None:
    root = app.state.settings.inputs.allowed_input_roots[0]
    r = client.post("/v1/jobs/tagging", json={"directory": str(root)})
    assert (r.status_code, r.json()["code"]) == (422, "no_inputs") and "no images or videos found" in r.json()["detail"]
    job = client.post("/v1/jobs/tagging", json={"items": [{"images": ["/x/a.jpg"]}]}).json()
    r = client.get(f"/v1/jobs/{job['id']}/items", params={"cursor": "x"})
    assert r.json() == {"detail": "bad cursor 'x'", "code": "bad_cursor"} and r.status_code == 422


def test_an_unexpected_failure_is_500_with_the_same_body(tmp_path: Path, redis_url: str, serve: type) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'b.db'}", broker_url=redis_url, auth="off"))

    def broken() -> None:
        raise RuntimeError("disk on fire")

    app.add_api_route("/broken", broken)
    with serve(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        r = c.get("/broken")
    assert r.status_code == 500
    assert r.json() == {
        "detail": "internal error (RuntimeError); the API log has the traceback",
        "code": "internal_error",
    }
