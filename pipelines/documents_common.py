"""What the document pipelines (summarize, extract, classify) share: options, prompt pieces, parsing,
per-chunk results with their pages, and the OCR prompt for scanned pages.

Prompts put the job-constant text (instructions, schema, labels) before the document text so that every
chunk of a job shares one prompt prefix and the engine's prefix cache reuses it.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field

from engine.structured import MAX_PATTERN_REPEAT
from preprocessing.chunking import Passage, chunk_budget, chunk_document
from preprocessing.documents import Document
from preprocessing.input_errors import InputError
from vlbatch.errors import EMPTY_DOCUMENT, OUTPUT_TRUNCATED, PARSE_ERROR, VlbatchError

__all__ = [
    "MAX_TOKENS_PER_CHAR",
    "MAX_TOKENS_PER_ESCAPED_CHAR",
    "OCR_SYSTEM_PREFIX",
    "DocumentOptions",
    "ParseError",
    "PassageResult",
    "clean_text",
    "defang",
    "document_block",
    "is_plain_string",
    "literal_tokens",
    "load_json",
    "ocr_max_output_tokens",
    "ocr_prompt",
    "pages_label",
    "parse_ocr",
    "plain_string",
    "plan_chunks",
    "prompt_overhead",
]

OCR_SYSTEM_PREFIX = "You transcribe scanned document pages. Output the page's text only, no commentary."


class ParseError(VlbatchError):
    """The model's answer is not the expected JSON: ``parse_error``, or ``output_truncated`` (pass
    ``code=OUTPUT_TRUNCATED``) when generation stopped at max_tokens before the JSON closed.
    """

    code = PARSE_ERROR


# Output bounds. A byte-level tokenizer spends at most one token per UTF-8 byte, so a character costs at most
# 4 tokens, and a JSON escape (up to 12 ASCII characters for a surrogate pair) up to 12. Free-text strings use
# ``plain_string``, which forbids backslash, quote and control characters, so no escape can appear and the
# 4-per-character bound holds; strings under a requester's own pattern may contain escapes and get 12.
MAX_TOKENS_PER_CHAR = 4
MAX_TOKENS_PER_ESCAPED_CHAR = 12
_PLAIN = '[^\\\\"\\u0000-\\u001f]'


def plain_string(min_chars: int, max_chars: int) -> dict[str, Any]:
    """A string schema of ``min_chars..max_chars`` characters without escapes. The length lives in the
    pattern too (the engine drops length keywords beside a pattern, see ``engine.structured``), except
    above ``MAX_PATTERN_REPEAT`` characters, which the grammar backend cannot compile: there the grammar
    only forbids escapes, ``max_output_tokens`` still bounds the answer and the parser cuts it.
    """
    if max_chars <= MAX_PATTERN_REPEAT:
        pattern = f"^{_PLAIN}{{{min_chars},{max_chars}}}$"
    else:
        pattern = f"^{_PLAIN}{{{min(min_chars, MAX_PATTERN_REPEAT)},{MAX_PATTERN_REPEAT}}}{_PLAIN}*$"
    return {"type": "string", "pattern": pattern, "minLength": min_chars, "maxLength": max_chars}


def is_plain_string(node: dict[str, Any]) -> bool:
    return str(node.get("pattern", "")).startswith(f"^{_PLAIN}{{")


def literal_tokens(value: Any) -> int:
    """Upper bound on the tokens of a JSON literal the grammar emits verbatim (an enum value, a key)."""
    return len(json.dumps(value, ensure_ascii=False).encode())


class DocumentOptions(BaseModel):
    """Options every document pipeline takes; each pipeline adds its own (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid")

    instructions: str | None = Field(
        None, max_length=2000, description="Extra guidance from the records team, added to every prompt."
    )
    overlap_tokens: int = Field(
        64, ge=0, le=4096, description="Tokens of a chunk's tail repeated at the start of the next chunk."
    )
    ocr: bool = Field(True, description="Transcribe scanned pages with the vision model; if false they are skipped.")
    max_page_visual_tokens: int = Field(
        1280, ge=64, le=16384, description="Visual-token budget of one scanned page image sent for transcription."
    )
    max_ocr_chars: int = Field(6000, ge=100, le=50000, description="Upper bound on one page's transcription.")


@dataclass(frozen=True, slots=True)
class PassageResult:
    """A parsed per-passage answer with the passage's place in the document, as stored by the worker."""

    chunk_index: int
    pages: tuple[int, ...]
    answer: dict[str, Any]


def load_json(text: str, *, finish_reason: str | None = None) -> Any:
    """Parse the model's JSON; structured outputs may leave raw control characters, hence ``strict=False``.
    Pass the engine's ``finish_reason`` so a cut-off answer is reported as ``output_truncated``.
    """
    try:
        return json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        if finish_reason == "length":
            raise ParseError(
                f"answer cut off at max_tokens before the JSON closed ({len(text)} characters)",
                code=OUTPUT_TRUNCATED,
            ) from exc
        raise ParseError(f"model answer is not JSON: {exc}") from exc


def clean_text(text: str, max_chars: int) -> str:
    """NFC, whitespace runs collapsed (paragraph breaks kept), cut to ``max_chars``."""
    text = unicodedata.normalize("NFC", text)
    paragraphs = (" ".join(p.split()) for p in text.replace("\r", "\n").split("\n\n"))
    return "\n\n".join(p for p in paragraphs if p)[:max_chars].strip()


def defang(text: str) -> str:
    """Break chat-template control sequences (``<|im_start|>`` and kin) inside document text, so a document
    cannot end the user turn or pose as the assistant; the tokenizer would otherwise read them as specials.
    """
    return text.replace("<|", "<\u200b|").replace("|>", "|\u200b>")


def pages_label(pages: Iterable[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"``."""
    nums = sorted(set(pages))
    ranges: list[str] = []
    start = prev = None
    for n in [*nums, None]:
        if start is not None and prev is not None and (n is None or n != prev + 1):
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if n is not None and start is None:
            start = n
        prev = n
    return ", ".join(ranges)


def document_block(chunk: Passage, *, total_pages: int | None = None) -> str:
    """The chunk's text between markers that name its pages (for the model's sense of place)."""
    of = f" of {total_pages}" if total_pages else ""
    word = "page" if len(chunk.pages) == 1 else "pages"
    return f'<document {word}="{pages_label(chunk.pages)}{of}">\n{defang(chunk.text)}\n</document>'


# Page numbers as wide as a 500-page document's, so a measured overhead holds for every chunk.
_WIDEST_CHUNK = Passage(index=0, text="", token_count=0, pages=(99998, 99999))


def prompt_overhead(
    count_tokens: Callable[[str], int], system: str, build_user: Callable[[Passage], str], template: int = 24
) -> int:
    """Prompt tokens besides the document text: the system prefix, the user prompt built around an empty
    chunk, and ``template`` for the chat template's own markers. Feed it to
    ``preprocessing.chunking.chunk_budget(prompt_tokens=...)``.
    """
    return count_tokens(system) + count_tokens(build_user(_WIDEST_CHUNK)) + template


def plan_chunks(
    doc: Document,
    count_tokens: Callable[[str], int],
    opts: DocumentOptions,
    *,
    max_model_len: int,
    system: str,
    build_user: Callable[[Passage], str],
    max_output_tokens: int,
) -> list[Passage]:
    """Chunks of ``doc`` sized for one pipeline's map prompt, e.g. for summarize::

        plan_chunks(doc, count, opts, max_model_len=ctx_len, system=summarize.SYSTEM_PREFIX,
                    build_user=lambda c: summarize.map_prompt(c, opts, total_pages=doc.page_count),
                    max_output_tokens=summarize.max_output_tokens(opts))

    A context too small for the options raises ``ValueError`` (a configuration error: fail the job before it
    runs). Scanned pages must be transcribed first unless ``opts.ocr`` is false; a document with no text
    left raises ``InputError("empty_document")`` (that document fails, the job goes on).
    """
    budget = chunk_budget(
        max_model_len=max_model_len,
        prompt_tokens=prompt_overhead(count_tokens, system, build_user),
        max_output_tokens=max_output_tokens,
    )
    overlap = min(opts.overlap_tokens, budget // 2)  # a small context keeps its chunks mostly new text
    chunks = chunk_document(doc, count_tokens, max_tokens=budget, overlap_tokens=overlap, skip_ocr=not opts.ocr)
    if not chunks:
        skipped = f" after skipping scanned pages {doc.ocr_pages}" if doc.ocr_pages else ""
        raise InputError(EMPTY_DOCUMENT, f"{doc.source}: no text to process{skipped}")
    return chunks


class _Bounded(Protocol):
    """What ``fitting_bound`` needs of a ``pipelines.base.DocumentPipeline`` (which imports this module)."""

    output_bound: ClassVar[str | None]
    system_prefix: ClassVar[str]

    def map_prompt(self, chunk: Passage, opts: Any, *, total_pages: int | None) -> str: ...

    def max_output_tokens(self, opts: Any) -> int: ...


def fitting_bound(
    pipeline: _Bounded,
    opts: BaseModel,
    count_tokens: Callable[[str], int],
    *,
    max_model_len: int,
    total_pages: int | None,
) -> int | None:
    """The largest value of the pipeline's ``output_bound`` option (below the one asked, down to its smallest valid
    one) whose map prompt leaves room for document text in ``max_model_len``; None when the pipeline has no such
    option or no value fits (then only a longer context helps). Names what to lower in a ``context_too_small``."""
    name = pipeline.output_bound
    if name is None:
        return None
    field = type(opts).model_fields[name]
    lowest = next((int(m.ge) for m in field.metadata if getattr(m, "ge", None) is not None), 1)

    def fits(value: int) -> bool:
        trial = opts.model_copy(update={name: value})
        try:
            chunk_budget(
                max_model_len=max_model_len,
                prompt_tokens=prompt_overhead(
                    count_tokens,
                    pipeline.system_prefix,
                    lambda c: pipeline.map_prompt(c, trial, total_pages=total_pages),
                ),
                max_output_tokens=pipeline.max_output_tokens(trial),
            )
        except ValueError:
            return False
        return True

    low, high = lowest, int(getattr(opts, name)) - 1  # the budget only shrinks as the bound grows: bisect
    if high < low or not fits(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def context_advice(
    pipeline: _Bounded,
    opts: BaseModel,
    count_tokens: Callable[[str], int],
    reason: str,
    *,
    max_model_len: int,
    total_pages: int | None,
) -> str:
    """A ``context_too_small`` message: ``reason`` (``plan_chunks``'s) and, when the pipeline has an answer-bounding
    option and a value of it fits (``fitting_bound``), that option and the largest value to lower it to."""
    name = pipeline.output_bound
    fit = fitting_bound(pipeline, opts, count_tokens, max_model_len=max_model_len, total_pages=total_pages)
    if name is None or fit is None:
        return reason
    return f"{reason}; or lower {name} to {fit} or less (the job asked {getattr(opts, name)})"


def ocr_prompt(page_number: int, total_pages: int | None = None) -> str:
    """User prompt sent with one rendered page image (plain-text answer, no JSON schema)."""
    of = f" of {total_pages}" if total_pages else ""
    return (
        f"This is page {page_number}{of} of a scanned document. Transcribe all its text in reading order. "
        "Keep headings on their own lines starting with '#', keep table rows on one line with ' | ' between "
        "cells, and write nothing that is not on the page."
    )


def ocr_max_output_tokens(opts: DocumentOptions) -> int:
    return opts.max_ocr_chars + 16


def parse_ocr(text: str, opts: DocumentOptions) -> str:
    """A transcription as page text for ``preprocessing.documents.replace_page_text``."""
    return unicodedata.normalize("NFC", text).replace("\r\n", "\n").strip()[: opts.max_ocr_chars]
