"""The tagging pipeline's pure parts: options, schema, token bound, parsing."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from pipelines.image_tagging import (
    ParseError,
    TaggingOptions,
    max_output_tokens,
    normalise_tags,
    output_schema,
    parse_answer,
    user_prompt,
)


def test_normalise_dedupes_and_caps() -> None:
    assert normalise_tags(["Beach ", "beach", "Sun_Set", "  ", "#dog!"], max_tags=10) == ["beach", "sun set", "dog"]
    assert normalise_tags(["a", "b", "c"], max_tags=2) == ["a", "b"]


def test_closed_vocabulary_schema_is_enum_and_filters() -> None:
    opts = TaggingOptions(vocabulary=["Dog", "cat", "dog"], max_tags=2)
    assert opts.vocabulary == ["dog", "cat"]
    schema = output_schema(opts)
    assert schema["properties"]["tags"]["items"]["enum"] == ["dog", "cat"]
    assert schema["properties"]["tags"]["maxItems"] == 2
    assert parse_answer(json.dumps({"tags": ["dog", "car", "cat", "dog"]}), opts) == {"tags": ["dog", "cat"]}
    assert "Choose only from this list: dog, cat" in user_prompt(opts, 1)


def test_caption_in_schema_and_parse() -> None:
    opts = TaggingOptions(caption=True, max_caption_chars=10)
    assert output_schema(opts)["required"] == ["tags", "caption"]
    out = parse_answer('{"tags": ["A"], "caption": "a very\\nlong caption"}', opts)
    assert out == {"tags": ["a"], "caption": "a very lon"}


def test_raw_control_characters_accepted() -> None:
    assert parse_answer('{"tags": ["tab\there"]}', TaggingOptions()) == {"tags": ["tab here"]}


@pytest.mark.parametrize("text", ["", "{", '{"tags": "x"}', "[1]", '{"tagz": []}'])
def test_bad_answers_raise_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_answer(text, TaggingOptions())


def test_truncated_answer_has_its_own_code() -> None:
    with pytest.raises(ParseError) as err:
        parse_answer('{"tags": ["ab', TaggingOptions(), finish_reason="length")
    assert err.value.code == "output_truncated"
    with pytest.raises(ParseError) as err:
        parse_answer('{"tags": ["ab', TaggingOptions(), finish_reason="stop")
    assert err.value.code == "parse_error"


def test_plain_string_pattern_refuses_escapes_and_bounds_length() -> None:
    pattern = re.compile(output_schema(TaggingOptions(max_tag_chars=5))["properties"]["tags"]["items"]["pattern"])
    assert pattern.match("beach") and pattern.match("été")
    for bad in ("", "sixsix", 'a"b', "a\\b", "a\nb", "a\x00"):
        assert not pattern.match(bad), bad


def test_max_tokens_covers_the_longest_answer_the_schema_allows() -> None:
    """Byte-level tokens: the worst answer spends one token per UTF-8 byte; the bound must hold it."""
    opts = TaggingOptions(max_tags=3, max_tag_chars=4, caption=True, max_caption_chars=6)
    worst = json.dumps({"tags": ["😀" * 4] * 3, "caption": "😀" * 6}, ensure_ascii=False)
    assert len(worst.encode()) <= max_output_tokens(opts)


def test_max_tokens_grows_with_schema_bounds() -> None:
    small = max_output_tokens(TaggingOptions(max_tags=2))
    assert max_output_tokens(TaggingOptions(max_tags=20)) > small
    assert max_output_tokens(TaggingOptions(max_tags=2, caption=True)) > small


def test_bad_options_rejected() -> None:
    with pytest.raises(ValidationError):
        TaggingOptions(vocabulary=["  ", "#"])
    with pytest.raises(ValidationError):
        TaggingOptions(max_tags=0)
