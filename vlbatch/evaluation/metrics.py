"""Scores of result rows against a labelled set, and agreement between two runs (pure functions).

A result row is what ``vlbatch tag`` / ``vlbatch documents`` export: ``ref``, ``status``, ``error_code``,
token counts, and ``tags`` (tagging) or ``output`` (documents: ``label`` for classify, ``data`` for
extract). Rows and labels meet by absolute path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipelines.image_tagging import normalise_tag
from vlbatch.errors import OUTPUT_TRUNCATED
from vlbatch.evaluation.labels import Expected

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
    items_exact: float | None = None  # items whose tags (or label, or every field) match exactly

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def f1(self) -> float | None:
        """The headline figure: micro tag F1, else label accuracy, else field exact-match."""
        if self.tags_overall is not None:
            return float(self.tags_overall["f1"])
        if self.label_accuracy is not None:
            return self.label_accuracy
        return self.fields_exact_overall


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


def score(labels: Sequence[Expected], rows: Sequence[Row]) -> Scores:
    """Every figure ``vlbatch eval`` reports, for the rows of one run against the labels."""
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
    tagged = [(e, r) for e, r in answered if e.tags is not None]
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
    labelled = [(e, r) for e, r in answered if e.label is not None and "tags" not in r]
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
    with_fields = [(e, r) for e, r in answered if e.fields]
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
    if exact:
        s.items_exact = sum(exact) / len(exact)
    return s


def answer_of(row: Row) -> Any:
    """What two runs must agree on for an item: its tag set, label or extracted data (None when it failed)."""
    if row.get("status") != "succeeded":
        return None
    tags = predicted_tags(row)
    if tags is not None:
        return sorted(tags)
    out = row.get("output")
    if isinstance(out, dict):
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
        ans_a = answer_of(a[e.path]) if e.path in a else None
        ans_b = answer_of(b[e.path]) if e.path in b else None
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
