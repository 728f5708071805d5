"""The tagging pipeline's pure parts: options, schema, token bound, parsing."""

from __future__ import annotations

import json

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


def test_max_tokens_grows_with_schema_bounds() -> None:
    small = max_output_tokens(TaggingOptions(max_tags=2))
    assert max_output_tokens(TaggingOptions(max_tags=20)) > small
    assert max_output_tokens(TaggingOptions(max_tags=2, caption=True)) > small


def test_bad_options_rejected() -> None:
    with pytest.raises(ValidationError):
        TaggingOptions(vocabulary=["  ", "#"])
    with pytest.raises(ValidationError):
        TaggingOptions(max_tags=0)
