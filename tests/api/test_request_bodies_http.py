"""Hostile JSON bodies over real HTTP: a million keys, nesting past the parser's depth, numbers JSON has no form
for. Each is a 4xx with a code and a small answer, never a 500 or an answer as large as the body."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from api.main import create_app
from tests.conftest import LiveServer, bearer, make_key
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def client(module_db_url: str, redis_url: str) -> Iterator[httpx.Client]:
    """One server and database per module and backend: every request here is refused."""
    settings = Settings(database_url=module_db_url, broker_url=redis_url, model_name="tiny")
    headers = bearer(make_key(module_db_url))
    with LiveServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=60, headers=headers) as c:
        yield c


def post_raw(client: httpx.Client, path: str, body: bytes) -> httpx.Response:
    return client.post(path, content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("route", ["/v1/jobs/tagging", "/v1/jobs"])
def test_options_with_many_keys_are_one_small_refusal(client: httpx.Client, route: str) -> None:
    keys = ",".join(f'"k{i}": 1' for i in range(100_000))
    body = f'{{"pipeline": "summarize", "items": [{{"images": ["/a.jpg"]}}], "options": {{{keys}}}}}'
    if route == "/v1/jobs/tagging":
        body = body.replace('"pipeline": "summarize", ', "")
    r = post_raw(client, route, body.encode())
    assert r.status_code == 422 and r.json()["code"] == "invalid_request"
    assert len(r.content) < 10_000  # one fault named, not one per key
    assert "100000 keys" in r.text


def test_a_422_lists_a_bounded_number_of_faults(client: httpx.Client) -> None:
    items = [{"images": "not-a-list"} for _ in range(5000)]
    r = client.post("/v1/jobs/tagging", json={"items": items})
    assert r.status_code == 422 and r.json()["code"] == "invalid_request"
    detail = r.json()["detail"]
    assert len(detail) <= 21 and "more faults" in detail[-1]["msg"]


def test_json_nested_past_the_parsers_depth_is_a_400_with_a_code(client: httpx.Client) -> None:
    depth = 100_000
    r = post_raw(client, "/v1/jobs/tagging", b"[" * depth + b"]" * depth)
    assert r.status_code == 400 and r.json()["code"] == "unparsable_body"


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_number_json_cannot_encode_is_echoed_as_text_in_the_422(client: httpx.Client, number: str) -> None:
    body = f'{{"items": [{{"images": ["/a.jpg"]}}], "model": {number}}}'.encode()
    r = post_raw(client, "/v1/jobs/tagging", body)
    assert r.status_code == 422 and r.json()["code"] == "invalid_request"
    echoed = json.dumps(r.json()["detail"])
    assert "inf" in echoed.lower() or "nan" in echoed.lower()
