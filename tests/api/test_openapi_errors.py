"""The OpenAPI spec's error answers, read from ``create_app(...).openapi()`` (no server): every operation lists
the statuses it can answer with, each with the registry codes that produce it (``x-error-codes``, and the enum of
the body's ``code``); no catch-all 4XX or 5XX. That the lists are complete is checked over HTTP by
``test_openapi_fuzz_http``, which allows no undocumented status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from api.main import create_app
from vlbatch.errors import CODES
from vlbatch.settings import Settings


def _spec(tmp_path: Path, **settings: Any) -> dict[str, Any]:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'spec.db'}", data_dir=tmp_path, **settings))
    return app.openapi()


def _operations(spec: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m.upper(), path): op for path, item in spec["paths"].items() for m, op in item.items()}


def _codes(spec: dict[str, Any], method: str, path: str) -> dict[int, set[str]]:
    """The documented error statuses of one operation with their codes."""
    responses = _operations(spec)[(method, path)]["responses"]
    return {int(s): set(r["x-error-codes"]) for s, r in responses.items() if int(s) >= 400}


def test_every_operation_documents_its_statuses_with_registered_codes(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    assert len(_operations(spec)) > 20
    for (method, path), op in _operations(spec).items():
        responses = op["responses"]
        assert not {"4XX", "5XX", "default"} & set(responses), (method, path)
        assert {"422", "500", "503"} <= set(responses), (method, path)
        for status, answer in responses.items():
            if int(status) < 400:
                continue
            codes = answer["x-error-codes"]
            assert codes, (method, path, status)
            for code in codes:
                entry = CODES[code]
                assert entry.http_status == int(status), (method, path, status, code)
                assert "api" in entry.used_in, (method, path, code)  # GET /v1/errors says the API answers with it
                assert f"`{code}`: {entry.meaning}" in answer["description"]
            schema = answer["content"]["application/json"]["schema"]
            assert schema["properties"]["code"]["enum"] == codes
            assert schema["required"] == ["detail", "code"]


def test_each_route_lists_what_it_raises(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    assert _codes(spec, "GET", "/v1/jobs/{job_id}") == {
        401: {"unauthorized"},
        404: {"job_not_found"},
        413: {"request_too_large"},
        422: {"invalid_request"},
        500: {"internal_error"},
        503: {"database_unavailable"},
    }
    for create in ("/v1/jobs", "/v1/jobs/tagging", "/v1/jobs/documents", "/v1/batches"):
        codes = _codes(spec, "POST", create)
        assert codes[413] == {"items_quota_exceeded", "request_too_large"}, create
        assert codes[429] == {"active_jobs_quota_exceeded", "dry_run_busy"}, create  # a create or its dry run
        assert {"no_model", "invalid_request"} <= codes[422], create
        assert codes[403] == {"cross_site_refused"}, create
    assert _codes(spec, "POST", "/v1/jobs")[409] == {"idempotency_key_reused", "model_not_served"}
    assert _codes(spec, "POST", "/v1/batches")[404] == {"file_not_found"}
    upload = _codes(spec, "POST", "/v1/files")  # past the body cap: its own cap and the tenant's quota
    assert upload[413] == {"upload_quota_exceeded", "upload_too_large", "uploads_held_quota_exceeded"}
    assert _codes(spec, "POST", "/v1/queues/pause")[403] == {"admin_required", "cross_site_refused"}
    assert _codes(spec, "PATCH", "/v1/jobs/{job_id}/items/{item_id}/tags")[404] == {"job_not_found", "item_not_found"}
    assert 401 not in _codes(spec, "GET", "/healthz") and 404 not in _codes(spec, "GET", "/healthz")


@pytest.mark.parametrize(("auth", "open_metrics"), [("off", False), ("on", True)])
def test_no_401_where_no_key_is_asked(tmp_path: Path, auth: str, open_metrics: bool) -> None:
    spec = _spec(tmp_path, auth=auth, auth_open_metrics=open_metrics)
    keyless = {(m, p) for m, p in _operations(spec) if 401 not in _codes(spec, m, p)}
    if auth == "off":
        assert keyless == set(_operations(spec))
    else:
        assert keyless == {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")}
