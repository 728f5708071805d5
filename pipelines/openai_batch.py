"""The OpenAI Batch (and vLLM ``run-batch``) line formats: input lines checked one at a time, output lines built.

An input line is ``{custom_id, method, url, body}``. ``check_line`` validates one line against the batch's
endpoint, the ``custom_id`` values seen so far and the batch's options, and returns either the request or the
error with its line number: one bad line fails that line, never the batch. Output lines are
``{id, custom_id, response: {status_code, request_id, body}, error}``; ``body`` is a ``chat.completion`` (or
``text_completion``) object with its choices, finish reason and usage.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipelines.base import RequestPipeline
from pipelines.chat import CHAT_ENDPOINT, ChatBody, RequestOptions
from vlbatch.db.filestore import LineTooLong
from vlbatch.db.results import ResultRecord
from vlbatch.errors import (
    BATCH_LINE_TOO_LONG,
    DUPLICATE_CUSTOM_ID,
    INVALID_BATCH_LINE,
    MISMATCHED_ENDPOINT,
    TOO_MANY_IMAGES,
    lookup,
)
from vlbatch.text import printable, text_fault


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid")

    custom_id: str = Field(min_length=1, max_length=512)
    method: Literal["POST"]
    url: str
    body: dict[str, Any]


@dataclass(frozen=True)
class CheckedLine:
    """One input line: its request, or the error it fails with (``code``, ``message`` naming the line)."""

    line: int  # 1-based, as an editor shows it
    custom_id: str | None
    url: str | None
    body: dict[str, Any] | None
    model: str | None = None
    code: str | None = None
    message: str | None = None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    # 1e400 parses to infinity, which no stored JSON (PostgreSQL's jsonb) and no answer can carry.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{printable(text, 40)} is out of a float's range")
    return value


def _first_error(exc: ValidationError, prefix: str) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def check_line(
    raw: str | bytes,
    *,
    line: int,
    endpoint: str,
    pipeline: RequestPipeline,
    opts: RequestOptions,
    seen: set[str],
) -> CheckedLine:
    """Validate one input line; ``seen`` (custom ids so far) gains this line's id when it is new."""

    def bad(code: str, message: str, custom_id: str | None = None, url: str | None = None) -> CheckedLine:
        return CheckedLine(line, custom_id, url, None, code=code, message=printable(f"line {line}: {message}", 1000))

    try:
        data = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:  # JSON and UTF-8 errors are ValueErrors; nesting past the stack
        return bad(INVALID_BATCH_LINE, f"not a JSON object ({printable(str(exc), 200)})")
    if not isinstance(data, dict):
        return bad(INVALID_BATCH_LINE, "not a JSON object")
    # The line is stored (PostgreSQL's jsonb and text take no NUL, no lone surrogate) and its custom_id written
    # back in the output: text that cannot be is this line's fault, not the batch's.
    if (fault := text_fault(data, "line")) is not None:
        return bad(INVALID_BATCH_LINE, fault)
    custom_id = data.get("custom_id") if isinstance(data.get("custom_id"), str) else None
    try:
        parsed = _Line.model_validate(data)
    except ValidationError as exc:
        return bad(INVALID_BATCH_LINE, _first_error(exc, ""), custom_id)
    if parsed.custom_id in seen:
        return bad(DUPLICATE_CUSTOM_ID, f"custom_id '{parsed.custom_id}' is used by an earlier line", custom_id)
    seen.add(parsed.custom_id)
    if parsed.url != endpoint:
        return bad(MISMATCHED_ENDPOINT, f"url '{parsed.url}' is not the batch's endpoint '{endpoint}'", custom_id)
    try:
        body = pipeline.Body.model_validate(parsed.body)
        if isinstance(body, ChatBody):
            body.output_schema()
    except ValidationError as exc:
        return bad(INVALID_BATCH_LINE, _first_error(exc, "body"), custom_id, parsed.url)
    except ValueError as exc:
        return bad(INVALID_BATCH_LINE, f"body.response_format: {exc}", custom_id, parsed.url)
    n_images = len(pipeline.sources(parsed.body))
    if n_images > opts.images_per_prompt:
        return bad(
            TOO_MANY_IMAGES, f"{n_images} images in one request; the limit is {opts.images_per_prompt}", custom_id
        )
    return CheckedLine(line, parsed.custom_id, parsed.url, parsed.body, model=getattr(body, "model", None))


MAX_LISTED_ERRORS = 100  # a batch's ``errors`` keeps the first ones; every bad line is in the error file


class LineChecker:
    """Checks a file's lines one at a time (``check``), keeping the counts, the first errors and the model.

    A batch runs on one model: the first line's ``model`` (or ``default_model`` while no line names one); a
    later line naming another fails. Blank lines are skipped; line numbers count them, as an editor does.
    """

    def __init__(
        self,
        pipeline: RequestPipeline,
        opts: RequestOptions,
        endpoint: str,
        default_model: str | None,
        *,
        one_model: bool = True,
        max_line_bytes: int = 0,
    ) -> None:
        self.pipeline, self.opts, self.endpoint = pipeline, opts, endpoint
        self.max_line_bytes = max_line_bytes  # the cap ``LineTooLong`` lines broke, for their message
        self._one = one_model
        self.model = default_model
        self._named: str | None = None
        self._seen: set[str] = set()
        self.valid = self.invalid = 0
        self.errors: list[dict[str, Any]] = []

    def check(self, raw_lines: Iterable[str | bytes | LineTooLong]) -> Iterator[CheckedLine]:
        for number, raw in enumerate(raw_lines, start=1):
            if isinstance(raw, LineTooLong):
                message = f"line {number}: {raw.size} bytes; a line may hold at most {self.max_line_bytes}"
                checked = CheckedLine(number, None, None, None, code=BATCH_LINE_TOO_LONG, message=message)
            elif not raw.strip():
                continue
            else:
                checked = check_line(
                    raw, line=number, endpoint=self.endpoint, pipeline=self.pipeline, opts=self.opts, seen=self._seen
                )
            checked = self._one_model(checked)
            if checked.code is not None:
                self.invalid += 1
                if len(self.errors) < MAX_LISTED_ERRORS:
                    self.errors.append({"code": checked.code, "message": checked.message, "line": number})
            else:
                self.valid += 1
            yield checked

    def _one_model(self, checked: CheckedLine) -> CheckedLine:
        if not self._one or checked.code is not None or checked.model is None:
            return checked
        if self._named is None:
            self._named = self.model = checked.model
            return checked
        if checked.model == self._named:
            return checked
        message = f"line {checked.line}: model '{checked.model}' is not the batch's model '{self._named}'"
        return CheckedLine(checked.line, checked.custom_id, checked.url, None, code=INVALID_BATCH_LINE, message=message)


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex}"


def response_body(
    endpoint: str,
    output: dict[str, Any],
    *,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    created: int,
) -> dict[str, Any]:
    """The ``chat.completion`` (or ``text_completion``) object of one answer."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    finish = output.get("finish_reason") or "stop"
    text = output.get("text", "")
    if endpoint == CHAT_ENDPOINT:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": None},
            "logprobs": None,
            "finish_reason": finish,
        }
        return {
            "id": new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": usage,
        }
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return {
        "id": new_id("cmpl-"),
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage,
    }


def output_line(custom_id: str | None, body: dict[str, Any]) -> dict[str, Any]:
    """A line of the output file: the request answered (HTTP 200)."""
    response = {"status_code": 200, "request_id": new_id("req_"), "body": body}
    return {"id": new_id("batch_req_"), "custom_id": custom_id, "response": response, "error": None}


def failed_line(custom_id: str | None, *, status_code: int, code: str, message: str) -> dict[str, Any]:
    """A line of the error file for a request that ran and failed (bad image, engine refusal, ...)."""
    error = {"message": message, "type": "invalid_request_error" if status_code < 500 else "server_error"}
    body = {"error": {**error, "param": None, "code": code}}
    response = {"status_code": status_code, "request_id": new_id("req_"), "body": body}
    return {"id": new_id("batch_req_"), "custom_id": custom_id, "response": response, "error": None}


def unrun_line(custom_id: str | None, *, code: str, message: str) -> dict[str, Any]:
    """A line of the error file for a request that never ran (invalid line, batch expired or cancelled)."""
    return {
        "id": new_id("batch_req_"),
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }


def stored_line(
    endpoint: str,
    *,
    custom_id: str | None,
    status: str,
    error_code: str | None,
    error_message: str | None,
    ran: bool,
    output: dict[str, Any] | None,
    prompt_tokens: int,
    completion_tokens: int,
    model: str,
    created: int,
) -> tuple[bool, dict[str, Any]]:
    """The line of an item as stored: (True, output line) when it was answered, else (False, error line)."""
    if status == "succeeded" and output is not None:
        body = response_body(
            endpoint,
            output,
            model=model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            created=created,
        )
        return True, output_line(custom_id, body)
    code = error_code or "internal_error"
    message = error_message or "the request did not finish"
    if ran:
        return False, failed_line(custom_id, status_code=lookup(code).http_status, code=code, message=message)
    return False, unrun_line(custom_id, code=code, message=message)


def line_of_record(endpoint: str, record: ResultRecord, *, model: str, created: int) -> tuple[bool, dict[str, Any]]:
    """``stored_line`` of an item of a batch's job (its ``custom_id`` is the item's ref): (answered, line)."""
    return stored_line(
        endpoint,
        custom_id=record.ref,
        status=record.status,
        error_code=record.error_code,
        error_message=record.error_message,
        ran=record.has_result,
        output=record.output,
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.completion_tokens,
        model=record.model or model,
        created=created,
    )
