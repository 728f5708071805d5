"""The ``summarize`` pipeline: map (summarise each chunk), then reduce (combine summaries), hierarchically
when the summaries do not fit one prompt. The reduce is this pipeline's own rounds (``Summarize.combine``).

``plan_reduce`` decides the whole reduce tree up front from worst-case sizes, so the worker can create every
reduce item at once; it needs a context that holds two maximal summaries (2 x ``max_output_tokens``).
``plan_next_level`` plans one level at a time from the summaries' real token counts, which are several times
smaller, and is the one to use on small contexts. A one-chunk document needs no reduce: its map summary is
the document summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from pipelines.base import Ask, Combine, DocumentPipeline
from pipelines.documents_common import (
    MAX_TOKENS_PER_CHAR,
    DocumentOptions,
    ParseError,
    PassageResult,
    clean_text,
    defang,
    document_block,
    literal_tokens,
    load_json,
    pages_label,
    plain_string,
)
from preprocessing.chunking import Passage

__all__ = [
    "NAME",
    "SYSTEM_PREFIX",
    "VERSION",
    "Options",
    "ParseError",
    "PartSummary",
    "ReduceGroup",
    "SummarizeOptions",
    "map_prompt",
    "max_output_tokens",
    "output_schema",
    "parse_answer",
    "plan_next_level",
    "plan_reduce",
    "plan_reduce_level",
    "reduce_budget",
    "reduce_item_overhead",
    "reduce_prompt",
]

NAME = "summarize"
VERSION = "1"

SYSTEM_PREFIX = (
    "You summarise long documents (contracts, reports, manuals) for a records team. State facts from the "
    "text only: parties, dates, amounts, obligations and decisions matter most. Answer with JSON only."
)


class SummarizeOptions(DocumentOptions):
    language: str = Field("en", min_length=2, max_length=16, description="Language of the summary.")
    max_summary_chars: int = Field(
        1200, ge=100, le=20000, description="Upper bound on every summary, partial or final, in characters."
    )


@dataclass(frozen=True, slots=True)
class PartSummary:
    """A summary that feeds a reduce prompt: a chunk's map answer or an earlier reduce answer."""

    text: str
    pages: tuple[int, ...]
    tokens: int


@dataclass(frozen=True, slots=True)
class ReduceGroup:
    """Indices into the previous level's summaries (level 0: the chunks' map summaries) reduced together.

    A group of one is ``carried``: its summary passes to the next level unchanged, without a model call.
    """

    inputs: tuple[int, ...]

    @property
    def carried(self) -> bool:
        return len(self.inputs) == 1


Options = SummarizeOptions  # the same name in every document pipeline, for generic wiring


def output_schema(opts: SummarizeOptions) -> dict[str, Any]:
    """Same schema for map and reduce answers, so a partial summary can stand in for a final one. The summary
    is one paragraph: newlines would need escapes, which would break the output bound.
    """
    summary = plain_string(1, opts.max_summary_chars)
    return {
        "type": "object",
        "properties": {"summary": summary},
        "required": ["summary"],
        "additionalProperties": False,
    }


def max_output_tokens(opts: SummarizeOptions) -> int:
    """Upper bound on answer tokens from the schema's bounds (see ``MAX_TOKENS_PER_CHAR``). Real summaries
    are several times shorter: plan reduce levels from their real token counts (``plan_reduce_level``).
    """
    return MAX_TOKENS_PER_CHAR * opts.max_summary_chars + literal_tokens({"summary": ""})


def _guidance(opts: SummarizeOptions) -> str:
    extra = f" Instructions from the requester: {defang(opts.instructions)}" if opts.instructions else ""
    return f"Write in language '{opts.language}', at most {opts.max_summary_chars} characters.{extra}"


def map_prompt(chunk: Passage, opts: SummarizeOptions, *, total_pages: int | None = None) -> str:
    """User prompt for one chunk. Built with an empty chunk it measures the prompt's overhead."""
    return (
        f"Summarise this part of a longer document. {_guidance(opts)} "
        'Answer as {"summary": "..."}.\n\n' + document_block(chunk, total_pages=total_pages)
    )


def reduce_prompt(parts: Sequence[PartSummary], opts: SummarizeOptions, *, final: bool) -> str:
    """User prompt combining consecutive partial summaries (in document order) into one."""
    what = (
        "one summary of the whole document"
        if final or not parts
        else f"one summary of pages {pages_label(p for part in parts for p in part.pages)}"
    )
    body = "\n\n".join(_summary_block(part) for part in parts)
    return (
        f"These are summaries of consecutive parts of a document, in order. Combine them into {what}; keep "
        f"every party, date, amount and obligation they name, drop repetition. {_guidance(opts)} "
        'Answer as {"summary": "..."}.\n\n' + body
    )


def _summary_block(part: PartSummary) -> str:
    return f'<summary pages="{pages_label(part.pages)}">\n{defang(part.text)}\n</summary>'


def reduce_item_overhead(count_tokens: Callable[[str], int]) -> int:
    """Tokens one summary costs in a reduce prompt beyond its own text (markers, page label, separator)."""
    return count_tokens("\n\n" + _summary_block(PartSummary("", (99998, 99999), 0))) + 2


def reduce_budget(opts: SummarizeOptions, count_tokens: Callable[[str], int], *, max_model_len: int) -> int:
    """Tokens of partial summaries (with their overhead) one reduce prompt can carry."""
    fixed = count_tokens(SYSTEM_PREFIX) + count_tokens(reduce_prompt([], opts, final=False)) + 24
    return max_model_len - fixed - max_output_tokens(opts)


def parse_answer(text: str, opts: SummarizeOptions, *, finish_reason: str | None = None) -> dict[str, Any]:
    """``{"summary": str}`` with whitespace tidied and the length bound enforced."""
    data = load_json(text, finish_reason=finish_reason)
    if not isinstance(data, dict) or not isinstance(data.get("summary"), str):
        raise ParseError(f"model answer lacks a string 'summary': {str(data)[:200]}")
    summary = clean_text(data["summary"], opts.max_summary_chars)
    if not summary:
        raise ParseError("model answer has an empty summary")
    return {"summary": summary}


# ------------------------------------------------------------------------------------------ planning


def plan_reduce_level(token_counts: Sequence[int], budget: int, *, item_overhead: int = 0) -> list[ReduceGroup]:
    """Group consecutive summaries so each group's tokens (plus ``item_overhead`` per summary, for its
    markers) fit ``budget``. Order is kept: a reduce sees neighbouring parts of the document. Called per
    level with the summaries' real token counts, it needs far less room than ``plan_reduce``'s bounds.
    """
    groups: list[ReduceGroup] = []
    current: list[int] = []
    used = 0
    for i, n in enumerate(token_counts):
        cost = n + item_overhead
        if cost > budget:
            raise ValueError(
                f"summary {i} needs {cost} tokens but the reduce budget is {budget}: lower max_summary_chars "
                "or raise max_model_len"
            )
        if current and used + cost > budget:
            groups.append(ReduceGroup(tuple(current)))
            current, used = [], 0
        current.append(i)
        used += cost
    if current:
        groups.append(ReduceGroup(tuple(current)))
    if len(groups) > 1 and all(g.carried for g in groups):  # a worker looping on this would never finish
        raise ValueError(
            f"no two of {len(token_counts)} summaries fit one reduce budget of {budget} tokens: lower "
            "max_summary_chars or raise max_model_len"
        )
    return groups


def plan_next_level(
    parts: Sequence[PartSummary], opts: SummarizeOptions, count_tokens: Callable[[str], int], *, max_model_len: int
) -> list[ReduceGroup]:
    """The next reduce level from the summaries in hand (their real token counts), as ``Summarize.combine``
    plans each of its rounds.
    """
    return plan_reduce_level(
        [p.tokens for p in parts],
        reduce_budget(opts, count_tokens, max_model_len=max_model_len),
        item_overhead=reduce_item_overhead(count_tokens),
    )


def plan_reduce(
    token_counts: Sequence[int], budget: int, *, output_tokens: int, item_overhead: int = 0
) -> list[list[ReduceGroup]]:
    """The whole reduce tree: level ``k`` groups the summaries produced by level ``k-1`` (level 0 groups the
    map summaries). The last level is one group, whose answer is the document summary; no levels for a
    single chunk. Later levels assume every reduce answer has ``output_tokens`` tokens (its upper bound),
    so the plan holds whatever the model writes.

    ``budget`` must hold two summaries of the larger of ``output_tokens`` and the biggest map summary:
    then every group but the last has two or more members and each level is smaller than the one before.
    """
    if not token_counts:
        raise ValueError("plan_reduce needs at least one summary")
    largest = max(output_tokens, *token_counts) + item_overhead
    if budget < 2 * largest:
        raise ValueError(
            f"reduce budget {budget} cannot hold two summaries of {largest} tokens (output_tokens={output_tokens}, "
            f"largest map summary={max(token_counts)}, item_overhead={item_overhead}): lower max_summary_chars "
            "or raise max_model_len"
        )
    levels: list[list[ReduceGroup]] = []
    counts = list(token_counts)
    while len(counts) > 1:
        groups = plan_reduce_level(counts, budget, item_overhead=item_overhead)
        levels.append(groups)
        counts = [counts[g.inputs[0]] if g.carried else output_tokens for g in groups]
    return levels


class Summarize(DocumentPipeline):
    name = NAME
    version = VERSION
    Options = SummarizeOptions
    system_prefix = SYSTEM_PREFIX
    output_bound = "max_summary_chars"

    def map_prompt(self, chunk: Passage, opts: SummarizeOptions, *, total_pages: int | None) -> str:
        return map_prompt(chunk, opts, total_pages=total_pages)

    def output_schema(self, opts: SummarizeOptions) -> dict[str, Any]:
        return output_schema(opts)

    def max_output_tokens(self, opts: SummarizeOptions) -> int:
        return max_output_tokens(opts)

    def parse(self, text: str, opts: SummarizeOptions, *, finish_reason: str | None) -> dict[str, Any]:
        return parse_answer(text, opts, finish_reason=finish_reason)

    def combine(
        self,
        results: Sequence[PassageResult],
        opts: SummarizeOptions,
        count_tokens: Callable[[str], int],
        *,
        max_model_len: int,
        stored: Mapping[tuple[str, int], dict[str, Any]],
    ) -> Combine:
        """Summaries of consecutive parts combined level by level until one is left (a tree when they do not
        fit one prompt): one round of asks per level, stage ``reduce<level>``. Each level is planned from the
        real token counts of the summaries in hand; an answer in ``stored`` is not asked again."""
        parts = [PartSummary(r.answer["summary"], r.pages, count_tokens(r.answer["summary"])) for r in results]
        levels: list[int] = []
        while len(parts) > 1:
            groups = plan_next_level(parts, opts, count_tokens, max_model_len=max_model_len)
            final = len(groups) == 1
            stage = f"reduce{len(levels) + 1}"
            merged: dict[int, PartSummary] = {}
            asks: list[Ask] = []
            for gi, group in enumerate(groups):
                members = [parts[i] for i in group.inputs]
                pages = tuple(sorted({p for m in members for p in m.pages}))
                if group.carried:
                    merged[gi] = members[0]
                elif (stage, gi) in stored:
                    text = str(stored[(stage, gi)]["summary"])
                    merged[gi] = PartSummary(text, pages, count_tokens(text))
                else:
                    user = reduce_prompt(members, opts, final=final)
                    asks.append(
                        Ask(stage, gi, pages, SYSTEM_PREFIX, user, output_schema(opts), max_output_tokens(opts))
                    )
            answers = (yield asks) if asks else []
            for a, answer in zip(asks, answers, strict=True):
                merged[a.idx] = PartSummary(answer["summary"], a.pages, count_tokens(answer["summary"]))
            levels.append(len(groups))
            parts = [merged[gi] for gi in range(len(groups))]
        return {
            "summary": parts[0].text,
            "pages": list(parts[0].pages),
            "map_parts": len(results),
            "reduce_levels": levels,
        }


PIPELINE = Summarize()
