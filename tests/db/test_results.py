"""One record per finished item, built in one place: an item without a result has no answer, no marker and zero
tokens; a result written before tags had sources takes its tags from its answer."""

from __future__ import annotations

from typing import Any

from vlbatch.db.results import RECORD_FIELDS, RESULT_COLUMNS, record

# A row of RESULT_COLUMNS by name (``has_result``'s place holds the result's item id), every field not named None.
_NAMED: dict[str, Any] = {"item_id": 7, "seq": 3, "ref": "r3", "status": "succeeded", "has_result": 7}
_NAMED |= {"output_text": '{"tags": ["a", "a", "b"], "caption": 5}', "raw_text": "raw", "prompt_tokens": 2}
_NAMED |= {"completion_tokens": 1, "model": "m", "pipeline_version": "1", "options_hash": "h"}


def _row(**named: Any) -> tuple[Any, ...]:
    values = _NAMED | named
    return tuple(values.get(name) for name in RECORD_FIELDS[:-1])  # all but inputs


ROW = _row()


def test_a_row_becomes_a_record_with_its_inputs() -> None:
    r = record((*ROW, {"images": ["/x.jpg"]}))
    assert len(RESULT_COLUMNS) == len(ROW)
    assert (r.item_id, r.seq, r.has_result, r.prompt_tokens, r.inputs) == (7, 3, True, 2, {"images": ["/x.jpg"]})
    assert r.tag_names == ["a", "b"] and r.tags is not None and {t["source"] for t in r.tags} == {"model"}
    assert r.caption is None  # not a string


def test_an_item_without_a_result() -> None:
    item = {"item_id": 8, "seq": 4, "status": "failed", "error_code": "decode_error", "error_message": "bad"}
    r = record(tuple(item.get(name) for name in RECORD_FIELDS[:-1]))
    assert (r.has_result, r.output, r.tags, r.tag_names, r.caption) == (False, None, None, None, None)
    assert (r.prompt_tokens, r.completion_tokens, r.inputs) == (0, 0, None)


def test_stored_tags_win_over_the_answers() -> None:
    r = record(_row(tags_text='[{"tag": "b", "source": "manual", "by": "k", "at": null}]'))
    assert r.tag_names == ["b"] and r.tags_json.startswith('[{"tag": "b"')
