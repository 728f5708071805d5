"""A batch file is parsed as a stream (SQLite and PostgreSQL, real HTTP): neither its dry run nor its create holds
the parsed bodies of many lines at once. A line's body parses to many times its size (a MiB of ``[]`` to some 24
MB), so a dry run keeps no body past its line, and a create writes its items a page at a time with a page capped
in bytes as well as in lines. Each parsed body is watched (``check_line``'s answer, as the checker gives it) and
the most alive at once counted; the memory figures are ``benchmarks/batch_memory.py``'s."""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.main import create_app
from pipelines import openai_batch
from tests.conftest import make_key
from vlbatch.db import batches
from vlbatch.settings import Settings

pytestmark = [pytest.mark.services, pytest.mark.timeout(120)]

LINES = 24
LINE_BYTES = 256 * 1024


class _Body(dict[str, Any]):
    """A parsed body whose life is counted."""


def _line(n: int) -> bytes:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x" * LINE_BYTES}], "max_tokens": 4}
    return json.dumps({"custom_id": f"{n}", "method": "POST", "url": "/v1/chat/completions", "body": body}).encode()


def test_a_batch_file_is_parsed_as_a_stream(
    db_url: str, redis_url: str, tmp_path: Path, serve: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    alive, most = [0], [0]

    def gone() -> None:
        alive[0] -= 1

    check = openai_batch.check_line

    def watched(*args: Any, **kwargs: Any) -> openai_batch.CheckedLine:
        checked = check(*args, **kwargs)
        if checked.body is None:
            return checked
        body = _Body(checked.body)
        alive[0] += 1
        most[0] = max(most[0], alive[0])
        weakref.finalize(body, gone)
        return openai_batch.CheckedLine(checked.line, checked.custom_id, checked.url, body, model=checked.model)

    monkeypatch.setattr(openai_batch, "check_line", watched)
    settings = Settings(
        database_url=db_url, broker_url=redis_url, model_name=f"nobody-{tmp_path.name}", data_dir=tmp_path / "data"
    )
    key = make_key(db_url, tenant="acme")
    data = b"\n".join(_line(n) for n in range(LINES)) + b"\n"
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=60) as client:
        client.headers["Authorization"] = f"Bearer {key}"
        up = client.post("/v1/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", data)})
        assert up.status_code == 200, up.text
        body = {"input_file_id": up.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        r = client.post("/v1/batches", json={**body, "dry_run": True})
        assert r.status_code == 200 and r.json()["items"] == LINES, r.text
        dry_run_most, most[0] = most[0], 0
        r = client.post("/v1/batches", json=body)
        assert r.status_code == 200 and r.json()["request_counts"]["total"] == LINES, r.text
    assert dry_run_most <= 2  # the line being checked, and the one before it on its way out
    # A page of items is at most PAGE_BYTES of lines (and the line that filled it), then written and let go.
    assert most[0] <= batches.PAGE_BYTES // LINE_BYTES + 2, most[0]
