"""The ``classify`` pipeline: one label from a closed set per chunk, merged into one label per document.

Each chunk answers ``{"label": <one of the labels>, "confidence": 0..1}``; ``merge_labels`` takes the
majority (ties broken by summed confidence, then by the earlier chunk) or the single most confident
chunk, and reports which chunks and pages voted for the winner.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from pipelines.base import DocumentPipeline
from pipelines.documents_common import (
    DocumentOptions,
    ParseError,
    PassageResult,
    defang,
    document_block,
    literal_tokens,
    load_json,
)
from preprocessing.chunking import Passage

__all__ = [
    "NAME",
    "SYSTEM_PREFIX",
    "VERSION",
    "ClassifyOptions",
    "Options",
    "ParseError",
    "map_prompt",
    "max_output_tokens",
    "merge_labels",
    "output_schema",
    "parse_answer",
    "select_chunks",
]

NAME = "classify"
VERSION = "1"

SYSTEM_PREFIX = "You classify documents for a records team. Pick exactly one label from the list; answer with JSON."


class ClassifyOptions(DocumentOptions):
    labels: list[str] = Field(..., min_length=1, max_length=500, description="The closed label set.")
    descriptions: dict[str, str] | None = Field(None, description="Optional one-line meaning per label.")
    merge: Literal["majority", "max_confidence"] = "majority"
    max_chunks: int | None = Field(
        None, ge=1, le=10000, description="Classify from the first N chunks only (a document's kind shows early)."
    )

    @model_validator(mode="after")
    def _clean_labels(self) -> ClassifyOptions:
        cleaned = list(dict.fromkeys(" ".join(unicodedata.normalize("NFC", lab).split()) for lab in self.labels))
        cleaned = [lab for lab in cleaned if lab]
        if not cleaned or any(len(lab) > 100 for lab in cleaned):
            raise ValueError("labels must hold 1..500 distinct non-blank labels of at most 100 characters")
        self.labels = cleaned
        if self.descriptions:
            unknown = set(self.descriptions) - set(cleaned)
            if unknown:
                raise ValueError(f"descriptions name labels that are not in 'labels': {sorted(unknown)}")
        return self


Options = ClassifyOptions  # the same name in every document pipeline, for generic wiring


def output_schema(opts: ClassifyOptions) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": opts.labels},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["label", "confidence"],
        "additionalProperties": False,
    }


def max_output_tokens(opts: ClassifyOptions) -> int:
    """Upper bound from the schema: the longest label, a number of up to 24 characters, the JSON around them."""
    longest = max(literal_tokens(lab) for lab in opts.labels)
    return longest + 24 + literal_tokens({"label": "", "confidence": 0})


def map_prompt(chunk: Passage, opts: ClassifyOptions, *, total_pages: int | None = None) -> str:
    """User prompt for one chunk: labels (with meanings) first, then the text."""
    lines = [
        f"- {lab}: {defang(opts.descriptions[lab])}" if opts.descriptions and lab in opts.descriptions else f"- {lab}"
        for lab in opts.labels
    ]
    extra = f"\nInstructions from the requester: {defang(opts.instructions)}" if opts.instructions else ""
    return (
        "Which one of these labels fits the document the excerpt below comes from?\n"
        + defang("\n".join(lines))
        + f"{extra}\nGive your confidence between 0 and 1. "
        'Answer as {"label": "...", "confidence": 0.0}.\n\n' + document_block(chunk, total_pages=total_pages)
    )


def parse_answer(text: str, opts: ClassifyOptions, *, finish_reason: str | None = None) -> dict[str, Any]:
    """``{"label": str, "confidence": float}``; a label outside the set (any case) is a parse error."""
    data = load_json(text, finish_reason=finish_reason)
    if not isinstance(data, dict) or not isinstance(data.get("label"), str):
        raise ParseError(f"model answer lacks a string 'label': {str(data)[:200]}")
    by_fold = {lab.casefold(): lab for lab in opts.labels}
    label = by_fold.get(" ".join(data["label"].split()).casefold())
    if label is None:
        raise ParseError(f"label {data['label'][:100]!r} is not one of the job's labels")
    conf = data.get("confidence", 0.5)
    if isinstance(conf, bool) or not isinstance(conf, int | float):
        raise ParseError(f"confidence {conf!r} is not a number")
    return {"label": label, "confidence": min(1.0, max(0.0, float(conf)))}


def select_chunks(chunks: Sequence[Passage], opts: ClassifyOptions) -> list[Passage]:
    """The chunks to classify: the first ``max_chunks`` when set, else all."""
    return list(chunks[: opts.max_chunks] if opts.max_chunks else chunks)


def merge_labels(results: Sequence[PassageResult], opts: ClassifyOptions) -> dict[str, Any]:
    """One label per document from per-chunk answers.

    Returns ``{"label", "confidence", "agreement", "votes": {label: n}, "chunks": [...], "pages": [...]}``:
    ``confidence`` is the winning chunks' mean confidence (``max_confidence``: the winner's own),
    ``agreement`` the share of chunks that chose the winner, ``chunks``/``pages`` where those votes came from.
    """
    if not results:
        raise ValueError("merge_labels needs at least one chunk result")
    ordered = sorted(results, key=lambda r: r.chunk_index)
    votes: dict[str, list[PassageResult]] = {}
    for r in ordered:
        votes.setdefault(r.answer["label"], []).append(r)
    if opts.merge == "max_confidence":
        # Highest confidence wins; ties go to the label more chunks chose, then the earlier chunk.
        best = max(ordered, key=lambda r: (r.answer["confidence"], len(votes[r.answer["label"]]), -r.chunk_index))
        winner = best.answer["label"]
        confidence = float(best.answer["confidence"])
    else:
        winner = max(
            votes,
            key=lambda lab: (
                len(votes[lab]),
                sum(r.answer["confidence"] for r in votes[lab]),
                -votes[lab][0].chunk_index,
            ),
        )
        confidence = sum(r.answer["confidence"] for r in votes[winner]) / len(votes[winner])
    chosen = votes[winner]
    return {
        "label": winner,
        "confidence": round(confidence, 4),
        "agreement": round(len(chosen) / len(ordered), 4),
        "votes": {lab: len(rs) for lab, rs in votes.items()},
        "chunks": [r.chunk_index for r in chosen],
        "pages": sorted({p for r in chosen for p in r.pages}),
    }


class Classify(DocumentPipeline):
    name = NAME
    version = VERSION
    Options = ClassifyOptions
    system_prefix = SYSTEM_PREFIX

    def map_prompt(self, chunk: Passage, opts: ClassifyOptions, *, total_pages: int | None) -> str:
        return map_prompt(chunk, opts, total_pages=total_pages)

    def output_schema(self, opts: ClassifyOptions) -> dict[str, Any]:
        return output_schema(opts)

    def max_output_tokens(self, opts: ClassifyOptions) -> int:
        return max_output_tokens(opts)

    def parse(self, text: str, opts: ClassifyOptions, *, finish_reason: str | None) -> dict[str, Any]:
        return parse_answer(text, opts, finish_reason=finish_reason)

    def select_chunks(self, chunks: Sequence[Passage], opts: ClassifyOptions) -> list[Passage]:
        return select_chunks(chunks, opts)

    def merge(self, results: Sequence[PassageResult], opts: ClassifyOptions) -> dict[str, Any]:
        return merge_labels(results, opts)


PIPELINE = Classify()
