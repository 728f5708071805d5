"""Scores of result rows against a labelled set, and agreement between two runs (pure functions).

A result row is what ``vlbatch tag`` / ``vlbatch docs`` export: ``ref``, ``status``, ``error_code``,
token counts, and ``tags`` (tagging) or ``output`` (documents: ``label`` for classify, ``data`` and
``provenance`` for extract, ``summary`` for summarize). Rows and labels meet by absolute path.

Documents get two more figures: page provenance (does the extraction cite the page a value is printed on)
and summary coverage (the share of a document's planted facts its summary mentions, see ``mentions``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cli.evaluation.labels import Expected
from pipelines.image_tagging import TaggingOptions, normalise_tag
from pipelines.tagging_language import in_asked_language
from vlbatch.errors import OUTPUT_TRUNCATED

Row = Mapping[str, Any]


@dataclass(frozen=True)
class PRF:
    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
        }


@dataclass
class Scores:
    items: int  # labelled items
    answered: int  # labelled items with a result row
    parse_rate: float  # rows that succeeded, of those answered
    truncation_rate: float  # rows that failed because the answer was cut off
    prompt_tokens_per_item: float
    completion_tokens_per_item: float
    missing: list[str] = field(default_factory=list)  # labelled paths without a row
    tags_overall: dict[str, float | int] | None = None  # micro-averaged
    tags_macro_f1: float | None = None
    tags_per_tag: dict[str, dict[str, float | int]] = field(default_factory=dict)
    label_accuracy: float | None = None
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)  # expected -> predicted -> count
    fields_exact: dict[str, float] = field(default_factory=dict)  # per field
    fields_exact_overall: float | None = None
    # Page provenance, per field: the cited pages hold the planted page / are exactly the planted pages.
    pages_hit: dict[str, float] = field(default_factory=dict)
    pages_exact: dict[str, float] = field(default_factory=dict)
    pages_hit_overall: float | None = None
    pages_exact_overall: float | None = None
    pages_cited_per_answer: float | None = None  # how many pages an answered value cites, on average
    # Summary coverage: planted facts the summary mentions, over all facts and per fact name.
    summary_coverage: float | None = None
    summary_per_fact: dict[str, float] = field(default_factory=dict)
    summaries_complete: float | None = None  # summaries that mention every planted fact
    items_exact: float | None = None  # items whose tags (or label, every field, every fact) match exactly
    # Tagging: the share of answers in the asked language, of those the detector could judge (``language_share``).
    language: str | None = None
    language_share: float | None = None
    language_judged: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def f1(self) -> float | None:
        """The headline figure: micro tag F1, else label accuracy, else field exact-match, else summary coverage."""
        if self.tags_overall is not None:
            return float(self.tags_overall["f1"])
        if self.label_accuracy is not None:
            return self.label_accuracy
        if self.fields_exact_overall is not None:
            return self.fields_exact_overall
        return self.summary_coverage


# What each task's answers can be scored on; another task (a plugin pipeline) is scored on every label given.
TASK_PARTS = {
    "tag": frozenset({"tags"}),
    "classify": frozenset({"label"}),
    "extract": frozenset({"fields", "pages"}),
    "summarize": frozenset({"facts"}),
}
ALL_PARTS = frozenset({"tags", "label", "fields", "pages", "facts"})


def predicted_tags(row: Row) -> frozenset[str] | None:
    tags = row.get("tags")
    if tags is None and isinstance(row.get("output"), dict):
        tags = row["output"].get("tags")
    if not isinstance(tags, list):
        return None
    return frozenset(n for n in (normalise_tag(str(t)) for t in tags) if n)


def predicted_label(row: Row) -> str | None:
    out = row.get("output")
    label = out.get("label") if isinstance(out, dict) else row.get("label")
    return str(label) if label is not None else None


def predicted_fields(row: Row) -> dict[str, Any]:
    out = row.get("output")
    data = out.get("data") if isinstance(out, dict) else None
    return data if isinstance(data, dict) else {}


def predicted_summary(row: Row) -> str:
    out = row.get("output")
    summary = out.get("summary") if isinstance(out, dict) else None
    return summary if isinstance(summary, str) else ""


def cited_pages(row: Row, name: str) -> tuple[int, ...]:
    """The pages an extraction cites for field ``name``'s answer: the provenance entry of the answered value
    (for a list field, every item's entry); none when the field was not answered or the row failed.
    """
    out = row.get("output")
    if row.get("status") != "succeeded" or not isinstance(out, dict) or not isinstance(out.get("provenance"), dict):
        return ()
    entries = [e for e in out["provenance"].get(name) or [] if isinstance(e, dict)]
    answer = predicted_fields(row).get(name)
    if answer is None or not entries:
        return ()
    if not isinstance(answer, list):
        entries = [next((e for e in entries if same_value(e.get("value"), answer)), entries[0])]
    return tuple(sorted({int(p) for e in entries for p in e.get("pages") or [] if isinstance(p, int)}))


_THOUSANDS = re.compile(r"(?<=\d)[,\u00a0\u202f ](?=\d{3}(?!\d))")
_NOT_WORD = re.compile(r"[\W_]+")


def match_text(text: str) -> str:
    """Text as facts are looked for in it: NFKC, case-folded, digit groups joined (``12,450.00`` ->
    ``12450.00``), every run of punctuation and space one space, padded so a fact matches whole words only.
    """
    text = _THOUSANDS.sub("", unicodedata.normalize("NFKC", text).casefold())
    return f" {_NOT_WORD.sub(' ', text).strip()} "


def mentions(summary: str, spellings: Iterable[str]) -> bool:
    """Whether ``summary`` mentions a fact in any of its spellings (whole words, see ``match_text``)."""
    hay = match_text(summary)
    return any(needle.strip() and needle in hay for needle in map(match_text, spellings))


def same_value(expected: Any, got: Any) -> bool:
    """Exact match after trimming and case-folding strings (numbers compare as numbers, 12 == 12.0)."""
    if isinstance(expected, str) and isinstance(got, str):
        return " ".join(expected.split()).casefold() == " ".join(got.split()).casefold()
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected is got
    if isinstance(expected, int | float) and isinstance(got, int | float):
        return float(expected) == float(got)
    if isinstance(expected, list) and isinstance(got, list):
        return len(expected) == len(got) and all(same_value(a, b) for a, b in zip(expected, got, strict=True))
    if isinstance(expected, dict) and isinstance(got, dict):
        return expected.keys() == got.keys() and all(same_value(v, got[k]) for k, v in expected.items())
    return bool(expected == got)


def rows_by_path(rows: Sequence[Row]) -> dict[Path, Row]:
    return {Path(str(r["ref"])).resolve(): r for r in rows if r.get("ref")}


def tag_scores(pairs: Sequence[tuple[frozenset[str], frozenset[str]]]) -> tuple[PRF, dict[str, PRF]]:
    """Micro P/R/F1 over (expected, predicted) tag sets, and the same per tag."""
    per: dict[str, list[int]] = {}
    for expected, got in pairs:
        for t in expected | got:
            c = per.setdefault(t, [0, 0, 0])
            c[0 if t in expected and t in got else 1 if t in got else 2] += 1
    per_tag = {t: PRF(*c) for t, c in sorted(per.items())}
    overall = PRF(*(sum(p[i] for p in per.values()) for i in range(3)))
    return overall, per_tag


def score(labels: Sequence[Expected], rows: Sequence[Row], *, task: str | None = None) -> Scores:
    """Every figure ``vlbatch eval`` reports, for the rows of one run against the labels. ``task`` limits
    the figures to what its answers hold (an extraction is not scored on a document's class label).
    """
    parts = TASK_PARTS.get(task or "", ALL_PARTS)
    by_path = rows_by_path(rows)
    answered = [(e, by_path[e.path]) for e in labels if e.path in by_path]
    ok = [(e, r) for e, r in answered if r.get("status") == "succeeded"]
    n = max(len(answered), 1)
    s = Scores(
        items=len(labels),
        answered=len(answered),
        parse_rate=len(ok) / n,
        truncation_rate=sum(r.get("error_code") == OUTPUT_TRUNCATED for _, r in answered) / n,
        prompt_tokens_per_item=sum(int(r.get("prompt_tokens") or 0) for _, r in answered) / n,
        completion_tokens_per_item=sum(int(r.get("completion_tokens") or 0) for _, r in answered) / n,
        missing=[str(e.path) for e in labels if e.path not in by_path],
    )
    exact: list[bool] = []
    tagged = [(e, r) for e, r in answered if e.tags is not None and "tags" in parts]
    if tagged:
        # A failed item predicted nothing: its expected tags all count as misses.
        pairs = [(e.tags or frozenset(), predicted_tags(r) or frozenset()) for e, r in tagged]
        overall, per_tag = tag_scores(pairs)
        s.tags_overall = overall.as_dict()
        s.tags_per_tag = {t: p.as_dict() for t, p in per_tag.items()}
        expected_tags = {t for e, _ in tagged for t in e.tags or ()}
        s.tags_macro_f1 = sum(per_tag[t].f1 for t in expected_tags) / max(len(expected_tags), 1)
        exact += [a == b for a, b in pairs]
    # A tagging row answers with tags, not a label: its label (the picture's class) is not scored.
    labelled = [(e, r) for e, r in answered if e.label is not None and "tags" not in r and "label" in parts]
    if labelled:
        hits = 0
        for e, r in labelled:
            got = predicted_label(r) if r.get("status") == "succeeded" else None
            key = got if got is not None else "(failed)"
            s.confusion.setdefault(str(e.label), {}).setdefault(key, 0)
            s.confusion[str(e.label)][key] += 1
            hits += got == e.label
            exact.append(got == e.label)
        s.label_accuracy = hits / len(labelled)
    with_fields = [(e, r) for e, r in answered if e.fields and "fields" in parts]
    if with_fields:
        per_field: dict[str, list[bool]] = {}
        for e, r in with_fields:
            data = predicted_fields(r) if r.get("status") == "succeeded" else {}
            matches = [same_value(v, data.get(k)) for k, v in e.fields.items()]
            for (k, _), m in zip(e.fields.items(), matches, strict=True):
                per_field.setdefault(k, []).append(m)
            exact.append(all(matches))
        s.fields_exact = {k: sum(v) / len(v) for k, v in sorted(per_field.items())}
        flat = [m for v in per_field.values() for m in v]
        s.fields_exact_overall = sum(flat) / len(flat)
    if "pages" in parts:
        _score_pages(s, [(e, r) for e, r in answered if e.pages])
    if "facts" in parts:
        exact += _score_facts(s, [(e, r) for e, r in answered if e.facts])
    if exact:
        s.items_exact = sum(exact) / len(exact)
    return s


def _score_pages(s: Scores, items: Sequence[tuple[Expected, Row]]) -> None:
    """Page provenance per field: a failed row or an unanswered field cites no page, so it misses."""
    hit: dict[str, list[bool]] = {}
    exact: dict[str, list[bool]] = {}
    cited_counts: list[int] = []
    for e, r in items:
        for name, planted in e.pages.items():
            cited = cited_pages(r, name)
            hit.setdefault(name, []).append(bool(set(planted) & set(cited)))
            exact.setdefault(name, []).append(cited == planted)
            if cited:
                cited_counts.append(len(cited))
    if not hit:
        return
    s.pages_hit = {k: sum(v) / len(v) for k, v in sorted(hit.items())}
    s.pages_exact = {k: sum(v) / len(v) for k, v in sorted(exact.items())}
    flat_hit = [m for v in hit.values() for m in v]
    flat_exact = [m for v in exact.values() for m in v]
    s.pages_hit_overall = sum(flat_hit) / len(flat_hit)
    s.pages_exact_overall = sum(flat_exact) / len(flat_exact)
    s.pages_cited_per_answer = sum(cited_counts) / len(cited_counts) if cited_counts else 0.0


def covered_facts(e: Expected, row: Row) -> list[str]:
    """The names of ``e``'s facts the row's summary mentions (none for a failed row)."""
    summary = predicted_summary(row) if row.get("status") == "succeeded" else ""
    return [name for name, spellings in e.facts.items() if mentions(summary, spellings)]


def _score_facts(s: Scores, items: Sequence[tuple[Expected, Row]]) -> list[bool]:
    """Summary coverage; returns per item whether every fact was mentioned."""
    if not items:
        return []
    per_fact: dict[str, list[bool]] = {}
    complete = []
    for e, r in items:
        covered = set(covered_facts(e, r))
        for name in e.facts:
            per_fact.setdefault(name, []).append(name in covered)
        complete.append(len(covered) == len(e.facts))
    flat = [m for v in per_fact.values() for m in v]
    s.summary_coverage = sum(flat) / len(flat)
    s.summary_per_fact = {k: sum(v) / len(v) for k, v in sorted(per_fact.items())}
    s.summaries_complete = sum(complete) / len(complete)
    return complete


def answer_of(row: Row, expected: Expected | None = None) -> Any:
    """What two runs must agree on for an item: its tag set, label or extracted data, or for a summary the
    planted facts it mentions (its wording may differ); None when it failed.
    """
    if row.get("status") != "succeeded":
        return None
    tags = predicted_tags(row)
    if tags is not None:
        return sorted(tags)
    out = row.get("output")
    if isinstance(out, dict):
        if "summary" in out and expected is not None and expected.facts:
            return {"facts_mentioned": covered_facts(expected, row)}
        return out.get("label", out.get("data", out))
    return None


@dataclass
class Comparison:
    items: int
    agreement: float
    differing: list[dict[str, Any]]  # {"path", "a", "b"}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(labels: Sequence[Expected], rows_a: Sequence[Row], rows_b: Sequence[Row]) -> Comparison:
    """Per-item agreement of two runs over the labelled items (an item missing or failed on one side differs)."""
    a, b = rows_by_path(rows_a), rows_by_path(rows_b)
    differing = []
    for e in labels:
        ans_a = answer_of(a[e.path], e) if e.path in a else None
        ans_b = answer_of(b[e.path], e) if e.path in b else None
        if ans_a is None or ans_b is None or not same_value(ans_a, ans_b):
            differing.append({"path": str(e.path), "a": ans_a, "b": ans_b})
    n = len(labels)
    return Comparison(n, (n - len(differing)) / n if n else 0.0, differing)


def gate(
    scores: Sequence[Scores], comparison: Comparison | None, *, min_f1: float | None, min_agreement: float | None
) -> list[str]:
    """The reasons the run fails its thresholds (empty: it passes)."""
    failures = []
    if min_f1 is not None:
        for i, s in enumerate(scores):
            f1 = s.f1
            if f1 is None or f1 < min_f1:
                side = "" if len(scores) == 1 else f" ({'AB'[i]})"
                failures.append(f"F1{side} {0.0 if f1 is None else f1:.3f} is below --min-f1 {min_f1}")
    if min_agreement is not None and comparison is not None and comparison.agreement < min_agreement:
        failures.append(f"agreement {comparison.agreement:.3f} is below --min-agreement {min_agreement}")
    return failures


def language_share(s: Scores, rows: Sequence[Row], opts: TaggingOptions) -> None:
    """The share of succeeded tagging answers in the asked language (``pipelines.tagging_language``'s rule, as
    the worker judges them), over the answers with something to judge."""
    verdicts = [
        in_asked_language(r["output"], opts)
        for r in rows
        if r.get("status") == "succeeded" and isinstance(r.get("output"), dict)
    ]
    judged = [v for v in verdicts if v is not None]
    s.language = opts.language
    s.language_judged = len(judged)
    s.language_share = sum(judged) / len(judged) if judged else None
