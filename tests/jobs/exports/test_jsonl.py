"""The JSONL writer's lines are ``json.dumps`` of the API's result objects, also for stored texts that are not one
ASCII line (non-ASCII, a newline inside a string) and for items without a result."""

from __future__ import annotations

import json

from api.schemas import ResultOut
from jobs.exports.jsonl import jsonl_chunks, jsonl_lines
from vlbatch.db.result_fields import EXPORTED
from vlbatch.db.results import ResultRecord

OUTPUT = json.dumps({"tags": ["sea"], "caption": "ünï\ncode"}, ensure_ascii=False, indent=1)


def _ok() -> ResultRecord:
    return ResultRecord(
        1, 0, 'r"0', "succeeded", None, None, True, output_text=OUTPUT, raw_text="raw\u2028", prompt_tokens=3,
        completion_tokens=4, model="m", model_revision="rev", pipeline_version="1", options_hash="h",
        tags_text=None, reused_from=9, prompt_hash="p",
    )  # fmt: skip


def _failed() -> ResultRecord:
    return ResultRecord(2, 1, None, "failed", "decode_error", "bad\tbytes", False)


# What ``_ok`` holds, as a line writes it (every field a line has is ``ResultOut``'s, checked below).
_OK_FIELDS = {
    "item_id": 1, "seq": 0, "ref": 'r"0', "status": "succeeded", "error_code": None, "error_message": None,
    "output": json.loads(OUTPUT), "raw_text": "raw\u2028", "prompt_tokens": 3, "completion_tokens": 4,
    "model": "m", "model_revision": "rev", "pipeline_version": "1", "options_hash": "h",
    "tags": [{"tag": "sea", "source": "model", "by": None, "at": None}], "reused_from": 9, "prompt_hash": "p",
}  # fmt: skip


def test_lines_are_json_dumps_of_the_api_fields() -> None:
    lines = jsonl_lines([_ok(), _failed()]).decode().splitlines()
    for record, line in zip([_ok(), _failed()], lines, strict=True):
        api = ResultOut.model_validate({name: getattr(record, name) for name in EXPORTED})
        assert line == json.dumps(api.model_dump(mode="json"))
    written = json.loads(lines[0])
    assert {key: written[key] for key in _OK_FIELDS} == _OK_FIELDS
    failed = json.loads(lines[1])
    assert (failed["output"], failed["tags"], failed["prompt_tokens"], failed["model"]) == (None, None, 0, None)
    assert failed["reused_from"] is None
    assert lines[0].isascii() and lines[1].isascii()


def test_each_page_is_one_chunk_and_empty_pages_none() -> None:
    assert len(list(jsonl_chunks([[_ok()], [], [_failed(), _ok()]]))) == 2
