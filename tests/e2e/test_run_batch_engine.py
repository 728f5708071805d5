"""``vlbatch run-batch`` on a JSONL written for vLLM's ``run-batch``: the real command (run in this process, on the
run's shared engine), the real engine on the tiny random-weight model, every input line answered exactly once, in
input order, in vLLM's output format."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from openai.types import BatchError
from openai.types.chat import ChatCompletion
from PIL import Image

from engine.runtime.runner import EngineRunner
from tests.support.engine import TEST_ENGINE
from tests.support.shared_engine import vlbatch_cli

pytestmark = [pytest.mark.engine("shared"), pytest.mark.timeout(900)]


def _vllm_lines(photo: Path) -> list[str]:
    """Lines as vLLM's run-batch documentation writes them (its model name, system prompt, max_completion_tokens)."""
    lines = []
    for i in range(6):
        body = {
            "model": "meta-llama/Meta-Llama-3-8B-Instruct",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": f"Hello world {i}!"},
            ],
            "max_completion_tokens": 6,
        }
        lines.append(
            json.dumps({"custom_id": f"request-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
        )
    image = [{"type": "image_url", "image_url": {"url": str(photo)}}, {"type": "text", "text": "Describe it."}]
    body = {"model": "m", "messages": [{"role": "user", "content": image}], "max_tokens": 5}
    lines.append(
        json.dumps({"custom_id": "request-image", "method": "POST", "url": "/v1/chat/completions", "body": body})
    )
    lines.append(
        json.dumps(
            {
                "custom_id": "request-stream",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {**body, "stream": True},
            }
        )
    )
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    body = {
        "messages": [{"role": "user", "content": "json"}],
        "max_tokens": 40,
        "response_format": fmt,
        "temperature": 0,
    }
    lines.append(
        json.dumps({"custom_id": "request-json", "method": "POST", "url": "/v1/chat/completions", "body": body})
    )
    lines.append("")  # a blank line is skipped, as vLLM skips it
    return lines


def test_a_vllm_run_batch_file_is_answered_line_for_line(
    tmp_path: Path, tiny_model: Path, shared_engine: EngineRunner
) -> None:
    photo = tmp_path / "red.png"
    Image.new("RGB", (64, 48), "red").save(photo)
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(_vllm_lines(photo)) + "\n")
    out = tmp_path / "out.jsonl"
    cmd = [
        "run-batch",
        "-i",
        str(src),
        "-o",
        str(out),
        "--model",
        str(tiny_model),
        "--engine",
        json.dumps(TEST_ENGINE),  # the shared engine's own (a lent engine keeps its arguments)
    ]
    proc = vlbatch_cli(cmd, env={"VLBATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'rb.db'}"})
    assert proc.exit_code == 0, proc.output[-3000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    ids = [json.loads(x)["custom_id"] for x in _vllm_lines(photo) if x]
    assert [r["custom_id"] for r in rows] == ids  # every line once, in input order
    assert "9 lines: 8 answered, 1 failed" in proc.stdout
    # The shared Rich progress bar, its output not a terminal: one plain line with done/total, requests/s and ETA.
    assert "\x1b" not in proc.stdout
    bar = re.search(r"(\d+)/(\d+) (\d+\.\d\d) requests/s \d+:\d\d:\d\d \d+:\d\d:\d\d", proc.stdout)
    assert bar is not None and bar[1] == bar[2] == "9", proc.stdout
    by_id = {r["custom_id"]: r for r in rows}
    for cid in [*(f"request-{i}" for i in range(6)), "request-image", "request-json"]:
        r = by_id[cid]
        assert r["error"] is None and r["response"]["status_code"] == 200, r
        done = ChatCompletion.model_validate(r["response"]["body"])
        assert done.object == "chat.completion" and len(done.choices) == 1
        assert done.choices[0].finish_reason in ("stop", "length")
        assert done.usage is not None and done.usage.prompt_tokens > 0
        assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens
        assert done.model == tiny_model.name
    for i in range(6):  # max_completion_tokens=6 holds
        assert ChatCompletion.model_validate(by_id[f"request-{i}"]["response"]["body"]).usage.completion_tokens <= 6
    answer = ChatCompletion.model_validate(by_id["request-json"]["response"]["body"]).choices[0]
    if answer.finish_reason == "stop":  # structured outputs: the schema's JSON, even from random weights
        assert isinstance(json.loads(answer.message.content or "")["a"], int)
    stream = by_id["request-stream"]
    assert stream["response"] is None
    err = BatchError.model_validate(stream["error"])
    assert err.code == "invalid_batch_line" and "line 8" in (err.message or "") and "stream" in (err.message or "")
