"""OpenAI's own client against the running API over real HTTP, a real ``vlbatch worker`` process and the vLLM CPU
engine on the tiny random-weight model, with PostgreSQL and Redis (the run's worker rig, tests/support/rig.py):
upload text and image lines (some invalid), create, poll, download the output and error files and parse them with
the client's types; cancel a second batch midway and check the lines answered before it are kept. Random weights:
structure, counts, usage and line bookkeeping are asserted, never content."""

from __future__ import annotations

import base64
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from openai.types import BatchError, Completion
from openai.types.chat import ChatCompletion
from PIL import Image

from tests.conftest import bearer
from tests.support.rig import RIG_MODEL, ServiceRig

openai = pytest.importorskip("openai")
pytestmark = [pytest.mark.engine("rig"), pytest.mark.services, pytest.mark.timeout(1500)]

MODEL = RIG_MODEL  # the rig's worker serves it
TENANT = "acme"  # its own tenant: the batch listings below see this test's batches only
CHAT = "/v1/chat/completions"


def _png(colour: str) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (80, 60), colour).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _line(cid: str, content: Any, *, url: str = CHAT, **extra: Any) -> str:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 8, **extra}
    return json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": body})


def _image(url: str) -> list[dict[str, Any]]:
    return [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is in the picture?"}]


def _first_file(photo: Path) -> tuple[bytes, set[str], dict[int, str]]:
    """Text and image lines, some invalid; returns the file, the ids that must be answered, and bad line -> code."""
    lines = [_line(f"text-{i}", f"Say something about {i}.") for i in range(10)]
    lines += [_line("image-red", _image(_png("red"))), _line("image-blue", _image(_png("blue")))]
    lines += [_line("image-path", _image(str(photo)))]
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": True}}
    lines += [_line("json", "A number as JSON.", response_format=fmt, max_tokens=30)]
    answered = {json.loads(x)["custom_id"] for x in lines}
    lines += [_line("broken-image", _image("data:image/png;base64," + base64.b64encode(b"not a png").decode()))]
    lines += [_line("stream", "hi", stream=True)]  # line 16
    lines += [_line("text-0", "again")]  # line 17: duplicate custom_id
    lines += [_line("unknown", "hi", best_of=3)]  # line 18: unknown field
    lines += ["[1, 2]"]  # line 19: not an object
    bad = {16: "invalid_batch_line", 17: "duplicate_custom_id", 18: "invalid_batch_line", 19: "invalid_batch_line"}
    return ("\n".join(lines) + "\n").encode(), answered, bad


def _wait(client: Any, batch_id: str, done: set[str], timeout: float = 600) -> Any:
    deadline = time.monotonic() + timeout
    while (b := client.batches.retrieve(batch_id)).status not in done:
        assert time.monotonic() < deadline, b
        time.sleep(0.5)
    return b


def _rows(client: Any, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(x) for x in client.files.content(file_id).read().decode().splitlines()]


def test_openai_client_runs_batches_on_a_real_worker(rig: ServiceRig) -> None:
    root = rig.root / "openai-photos"
    root.mkdir()
    photo = root / "green.jpg"
    Image.new("RGB", (90, 70), "green").save(photo)
    key = rig.key(TENANT)
    client = openai.OpenAI(base_url=f"{rig.api_url}/v1", api_key=key, max_retries=0, timeout=60)
    assert bearer(key)["Authorization"].startswith("Bearer ")  # the header the client sends
    data, answered, bad = _first_file(photo)
    up = client.files.create(file=("requests.jsonl", io.BytesIO(data)), purpose="batch")
    first = client.batches.create(input_file_id=up.id, endpoint=CHAT, completion_window="24h")
    assert first.status == "in_progress" and first.request_counts.total == 19
    assert {e.line: e.code for e in first.errors.data} == bad
    b = _wait(client, first.id, {"completed", "failed", "expired"})
    assert b.status == "completed", (b, rig.log_tail())
    assert b.completed_at and b.finalizing_at and b.in_progress_at
    assert b.request_counts.completed == len(answered) and b.request_counts.failed == 19 - len(answered)
    out, err = _rows(client, b.output_file_id), _rows(client, b.error_file_id)
    assert {r["custom_id"] for r in out} == answered and len(out) == len(answered)
    usage = 0
    for r in out:
        assert r["error"] is None and r["response"]["status_code"] == 200
        body = ChatCompletion.model_validate(r["response"]["body"])
        assert body.object == "chat.completion" and body.model == MODEL and len(body.choices) == 1
        assert body.choices[0].finish_reason in ("stop", "length") and body.usage is not None
        assert body.usage.prompt_tokens > 0 and 0 < body.usage.completion_tokens <= 30
        usage += body.usage.total_tokens
    assert b.usage is not None and b.usage.total_tokens == usage
    json_answer = next(r for r in out if r["custom_id"] == "json")["response"]["body"]["choices"][0]
    if json_answer["finish_reason"] == "stop":  # structured outputs hold even on random weights
        assert isinstance(json.loads(json_answer["message"]["content"])["n"], int)
    assert len(err) == 19 - len(answered)
    broken = next(r for r in err if r["custom_id"] == "broken-image")
    assert broken["response"]["status_code"] == 422 and broken["error"] is None
    assert broken["response"]["body"]["error"]["code"] == "decode_error"
    unrun = [BatchError.model_validate(r["error"]) for r in err if r["custom_id"] != "broken-image"]
    assert sorted(e.code or "" for e in unrun) == sorted(bad.values())
    assert all(f"line {line}:" in " ".join(e.message or "" for e in unrun) for line in bad)

    # completions: the text_completion body
    lines = [
        json.dumps(
            {
                "custom_id": f"c{i}",
                "method": "POST",
                "url": "/v1/completions",
                "body": {"model": MODEL, "prompt": f"Once upon a time {i}", "max_tokens": 5},
            }
        )
        for i in range(3)
    ]
    up = client.files.create(file=("c.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
    comp = client.batches.create(input_file_id=up.id, endpoint="/v1/completions", completion_window="24h")
    comp = _wait(client, comp.id, {"completed", "failed", "expired"})
    rows = _rows(client, comp.output_file_id)
    assert comp.status == "completed" and [r["custom_id"] for r in rows] == ["c0", "c1", "c2"]
    for r in rows:
        body = Completion.model_validate(r["response"]["body"])
        assert body.object == "text_completion" and body.usage and body.usage.completion_tokens <= 5

    # a second batch cancelled midway keeps what was answered
    many = [_line(f"m{i}", f"Count to {i}.", max_tokens=48) for i in range(400)]
    up = client.files.create(file=("many.jsonl", io.BytesIO("\n".join(many).encode())), purpose="batch")
    second = client.batches.create(input_file_id=up.id, endpoint=CHAT, completion_window="24h")
    deadline = time.monotonic() + 600
    while client.batches.retrieve(second.id).request_counts.completed < 5:
        assert time.monotonic() < deadline, rig.log_tail()
        time.sleep(0.2)
    assert client.batches.cancel(second.id).status in ("cancelling", "cancelled")
    c = _wait(client, second.id, {"cancelled"}, timeout=60)
    assert c.cancelled_at and c.cancelling_at and c.request_counts.total == 400
    kept, dropped = _rows(client, c.output_file_id), _rows(client, c.error_file_id)
    assert 5 <= len(kept) == c.request_counts.completed < 400, "the batch finished before the cancel"
    assert len(kept) + len(dropped) == 400
    assert {r["custom_id"] for r in kept} | {r["custom_id"] for r in dropped} == {f"m{i}" for i in range(400)}
    assert all(ChatCompletion.model_validate(r["response"]["body"]).usage for r in kept)
    assert {BatchError.model_validate(r["error"]).code for r in dropped} == {"batch_cancelled"}
    listed = client.batches.list(limit=2)
    assert [x.id for x in listed.data] == [second.id, comp.id] and listed.has_more
    assert [x.id for x in client.batches.list(limit=5, after=comp.id).data] == [first.id]
