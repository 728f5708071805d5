"""The language rule of tagging answers (``pipelines.tagging_language``, ``preprocessing.language``): short texts
and vocabulary tags are not judged, a caption or most judged tags in another language make the answer wrong, the
first review asks again with the answer shown, the last keeps it with a warning."""

from __future__ import annotations

import pytest

from pipelines.image_tagging import PIPELINE
from pipelines.tagging_language import in_asked_language, strays
from preprocessing.language import judged, language_of
from vlbatch.errors import ANSWER_LANGUAGE_MISMATCH

GERMAN = {"tags": ["hochzeit", "familie", "landschaft", "kirche"], "caption": "Eine Hochzeit am See."}
ENGLISH = {"tags": ["wedding", "family", "mountain lake", "church"], "caption": "A wedding by a lake."}


@pytest.mark.parametrize(
    ("named", "code"), [("de", "DE"), ("pt-BR", "PT"), ("German", "DE"), ("no", "NB"), ("xx", None), ("Klingon", None)]
)
def test_the_option_names_a_language_by_code_or_english_name(named: str, code: str | None) -> None:
    language = language_of(named)
    assert (language.iso_code_639_1.name if language else None) == code


def test_short_texts_are_not_judged() -> None:
    assert not judged("car") and not judged("ok") and not judged("a-b") and judged("Hund")


def test_the_answer_in_the_asked_language_stands() -> None:
    opts = PIPELINE.options({"language": "de", "caption": True})
    assert PIPELINE.reviews(opts)
    assert PIPELINE.review(GERMAN, opts, last=False) == (GERMAN, None)
    assert in_asked_language(GERMAN, opts) is True


def test_one_odd_word_does_not_make_an_answer_wrong() -> None:
    opts = PIPELINE.options({"language": "en"})
    output = {"tags": ["beach", "sunset", "family", "hotel", "Sonnenuntergang"]}
    others, wrong = strays(output, opts)
    assert "sonnenuntergang" in [t.lower() for t in others] and not wrong


def test_another_language_is_asked_again_then_kept_with_a_warning() -> None:
    opts = PIPELINE.options({"language": "de", "caption": True})
    assert in_asked_language(ENGLISH, opts) is False
    kept, instruction = PIPELINE.review(ENGLISH, opts, last=False)
    assert kept == ENGLISH and instruction is not None
    assert '"wedding"' in instruction and "German" in instruction and "tags and caption" in instruction
    kept, instruction = PIPELINE.review(ENGLISH, opts, last=True)
    assert instruction is None and kept["tags"] == ENGLISH["tags"]
    (warning,) = kept["warnings"]
    assert warning["code"] == ANSWER_LANGUAGE_MISMATCH and '"A wedding by a lake."' in warning["message"]


def test_a_caption_in_another_language_is_enough() -> None:
    opts = PIPELINE.options({"language": "de", "caption": True})
    assert strays({"tags": ["hochzeit"], "caption": "A wedding by a lake with the whole family."}, opts)[1]


def test_vocabulary_tags_are_never_in_the_wrong_language() -> None:
    opts = PIPELINE.options({"language": "de", "vocabulary": ["beach", "mountain lake", "wedding"]})
    assert strays({"tags": ["beach", "mountain lake", "wedding"]}, opts) == ([], False)
    assert in_asked_language({"tags": ["beach", "wedding"]}, opts) is None  # nothing left to judge


def test_checked_for_every_language_the_detector_knows_but_english() -> None:
    assert not PIPELINE.reviews(PIPELINE.options({}))
    assert not PIPELINE.reviews(PIPELINE.options({"language": "en-GB"}))
    assert not PIPELINE.reviews(PIPELINE.options({"language": "tlh"}))
    assert PIPELINE.reviews(PIPELINE.options({"language": "fr"}))


def test_context_accepts_only_facts_with_a_provider_in_one_order() -> None:
    assert PIPELINE.options({"context": ["filename", "keywords", "date"]}).context == ["date", "keywords", "filename"]
    with pytest.raises(ValueError, match="unknown context fact"):
        PIPELINE.options({"context": ["people"]})
