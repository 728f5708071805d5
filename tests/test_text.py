"""vlbatch.text: which strings cannot be stored or answered, where in a body they are, and how to echo them."""

from __future__ import annotations

import json

import pytest

from vlbatch.text import printable, text_fault, wide_object


def test_a_clean_value_has_no_fault() -> None:
    assert text_fault({"items": [{"images": ["/a.jpg"], "prompt": "Tag it ünïcode ✓"}], "n": 3}) is None


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (
            {"items": [{"prompt": "ok"}, {"prompt": "bad\x00tail"}]},
            "body.items[1].prompt holds a NUL character at position 3",
        ),
        ({"meta": {"x\ud800": "v"}}, "body.meta key holds a lone surrogate (U+D800) at position 1"),
        (["fine", ("also", "\udfff")], "body[1][1] holds a lone surrogate (U+DFFF) at position 0"),
    ],
)
def test_a_fault_is_named_by_its_path_and_position(value: object, named: str) -> None:
    message = text_fault(value)
    assert message is not None and message.startswith(named)


def test_the_first_faulty_field_in_order_is_the_one_named() -> None:
    message = text_fault({"a": "one\x00", "b": "two\x00"}, where="line 7")
    assert message is not None and message.startswith("line 7.a ")


def test_printable_escapes_what_cannot_be_encoded_and_cuts_to_the_limit() -> None:
    echoed = printable("a\x00b\ud800c", limit=100)
    assert echoed == "a\\x00b\\ud800c"
    json.dumps(echoed).encode("utf-8")  # encodable: no lone surrogate is left
    assert printable("x" * 50, limit=10) == "x" * 10 + "... (50 characters)"


def test_a_wide_object_is_named_once_at_its_path() -> None:
    body = {"items": [{"ok": 1}, {f"k{i}": i for i in range(6)}]}
    assert wide_object(body, max_keys=5) == "body.items[1] has 6 keys; an object may have at most 5"
    assert wide_object(body, max_keys=6) is None
