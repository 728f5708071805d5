"""Whether a tagging answer is in the language its job asked for (the option ``language``), and what to do when not.

Each tag and the caption is judged by ``preprocessing.language`` (short texts are not judged; the module says the
rule). Tags from the job's ``vocabulary`` are never judged: the vocabulary is the user's own words. An answer is in
another language when its caption is, or when more than half of its judged tags are (one odd word, "hotel" or
"pizza", does not make an answer wrong).

Such an answer is asked for once more (the worker's rounds), with the answer itself and the language named; if the
second answer is still in another language it is kept, with an ``answer_language_mismatch`` warning in its output.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from preprocessing.language import in_other_language, judged, language_of, name_of
from vlbatch.errors import ANSWER_LANGUAGE_MISMATCH


class TaggingOptions(Protocol):
    """What of ``pipelines.image_tagging.TaggingOptions`` the language check reads (that module imports this)."""

    language: str
    vocabulary: list[str] | None
    caption: bool


__all__ = ["WARNINGS", "checks_language", "in_asked_language", "review_language", "strays"]

WARNINGS = "warnings"  # the output's list of {code, message}: what is wrong with an answer that is kept


def checks_language(opts: TaggingOptions) -> bool:
    """Whether the worker judges the answers of a job with these options: when its ``language`` is one the detector
    knows, other than English. English is the default (a job's stored options name it whether or not its user did)
    and the language small models fall back to: the answers that go wrong are the ones asked in another."""
    asked = language_of(opts.language)
    return asked is not None and asked.iso_code_639_1.name != "EN"


def strays(output: dict[str, Any], opts: TaggingOptions) -> tuple[list[str], bool]:
    """The answer's texts judged in another language (tags, then the caption), and whether the answer as a whole
    is (the module's rule). Nothing is judged for a language the detector does not know."""
    asked = language_of(opts.language)
    if asked is None:
        return [], False
    vocabulary = set(opts.vocabulary or ())
    tags = [t for t in output.get("tags", []) if t not in vocabulary and judged(t)]
    wrong_tags = [t for t in tags if in_other_language(t, asked)]
    caption = output.get("caption") or ""
    wrong_caption = bool(caption) and in_other_language(caption, asked)
    wrong = wrong_caption or 2 * len(wrong_tags) > len(tags) > 0
    return wrong_tags + ([caption] if wrong_caption else []), wrong


def in_asked_language(output: dict[str, Any], opts: TaggingOptions) -> bool | None:
    """True or False by the module's rule; None when nothing in the answer can be judged."""
    if language_of(opts.language) is None:
        return None
    vocabulary = set(opts.vocabulary or ())
    texts = [t for t in output.get("tags", []) if t not in vocabulary] + [output.get("caption") or ""]
    if not any(judged(t) for t in texts):
        return None
    return not strays(output, opts)[1]


def review_language(output: dict[str, Any], opts: TaggingOptions, *, last: bool) -> tuple[dict[str, Any], str | None]:
    """``ImagePipeline.review`` for the language: the answer as it stands, the instruction to ask again with, or
    (``last``) the answer with its warning."""
    asked = language_of(opts.language)
    others, wrong = strays(output, opts)
    if asked is None or not wrong:
        return output, None
    name = name_of(asked)
    if not last:
        shown = {k: output[k] for k in ("tags", "caption") if k in output}
        what = "tags and caption" if opts.caption else "tags"
        return output, (
            f"Your earlier answer {json.dumps(shown, ensure_ascii=False)} is not in {name}. Give the same {what} "
            f"again, written in {name} (language '{opts.language}')."
        )
    listed = ", ".join(json.dumps(t, ensure_ascii=False) for t in others)
    warning = {
        "code": ANSWER_LANGUAGE_MISMATCH,
        "message": f"asked for {name} ('{opts.language}'); after one more round these are still in another "
        f"language: {listed}",
    }
    return {**output, WARNINGS: [*output.get(WARNINGS, []), warning]}, None
