"""One record per finished item, built in one place: an item without a result has no answer, no marker and zero
tokens; a result written before tags had sources takes its tags from its answer."""

from __future__ import annotations

from vlbatch.db.results import RESULT_COLUMNS, record

ROW = (7, 3, "r3", "succeeded", None, None, 7, '{"tags": ["a", "a", "b"], "caption": 5}', "raw", 2, 1, "m", "1", "h")


def test_a_row_becomes_a_record_with_its_inputs() -> None:
    r = record((*ROW, None, None, {"images": ["/x.jpg"]}))
    assert len(RESULT_COLUMNS) == 16
    assert (r.item_id, r.seq, r.has_result, r.prompt_tokens, r.inputs) == (7, 3, True, 2, {"images": ["/x.jpg"]})
    assert r.tag_names == ["a", "b"] and r.tags is not None and {t["source"] for t in r.tags} == {"model"}
    assert r.caption is None  # not a string


def test_an_item_without_a_result() -> None:
    r = record(
        (8, 4, None, "failed", "decode_error", "bad", None, None, None, None, None, None, None, None, None, None)
    )
    assert (r.has_result, r.output, r.tags, r.tag_names, r.caption) == (False, None, None, None, None)
    assert (r.prompt_tokens, r.completion_tokens, r.inputs) == (0, 0, None)


def test_stored_tags_win_over_the_answers() -> None:
    r = record((*ROW, '[{"tag": "b", "source": "manual", "by": "k", "at": null}]', None))
    assert r.tag_names == ["b"] and r.tags_json.startswith('[{"tag": "b"')
