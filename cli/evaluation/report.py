"""The short Markdown report of ``vlbatch eval`` (the JSON holds every figure; this is for reading)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cli.evaluation.metrics import Comparison, Scores


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _scores(title: str, s: Scores) -> list[str]:
    lines = [
        f"## {title}",
        "",
        f"- items: {s.answered} of {s.items} answered; "
        f"parsed {_pct(s.parse_rate)}, truncated {_pct(s.truncation_rate)}",
        f"- tokens per item: {s.prompt_tokens_per_item:.1f} prompt, {s.completion_tokens_per_item:.1f} completion",
    ]
    if s.items_exact is not None:
        lines.append(f"- items exactly right: {_pct(s.items_exact)}")
    if s.language is not None:
        lines.append(
            f"- answers in the asked language ('{s.language}'): {_pct(s.language_share)} of {s.language_judged} "
            "that could be judged"
        )
    if s.tags_overall is not None:
        o = s.tags_overall
        lines += [
            f"- tags (micro): precision {_pct(float(o['precision']))}, recall {_pct(float(o['recall']))}, "
            f"F1 {_pct(float(o['f1']))}; macro F1 {_pct(s.tags_macro_f1)}",
            "",
            "| tag | precision | recall | F1 | tp | fp | fn |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for tag, p in s.tags_per_tag.items():
            lines.append(
                f"| {tag} | {_pct(float(p['precision']))} | {_pct(float(p['recall']))} | {_pct(float(p['f1']))} "
                f"| {p['tp']} | {p['fp']} | {p['fn']} |"
            )
    if s.label_accuracy is not None:
        predicted = sorted({p for row in s.confusion.values() for p in row})
        lines += [
            f"- label accuracy: {_pct(s.label_accuracy)}",
            "",
            "| expected \\ predicted | " + " | ".join(predicted) + " |",
            "| --- |" + " --- |" * len(predicted),
        ]
        for exp, row in sorted(s.confusion.items()):
            lines.append(f"| {exp} | " + " | ".join(str(row.get(p, 0)) for p in predicted) + " |")
    if s.fields_exact:
        lines += [f"- fields exact-match: {_pct(s.fields_exact_overall)}", ""]
        lines += ["| field | exact |", "| --- | --- |"] + [f"| {k} | {_pct(v)} |" for k, v in s.fields_exact.items()]
    if s.pages_hit:
        lines += [
            "",
            f"- page provenance: cites the planted page {_pct(s.pages_hit_overall)}, only the planted page "
            f"{_pct(s.pages_exact_overall)}; {s.pages_cited_per_answer or 0:.1f} pages cited per answer",
            "",
            "| field | cites planted page | only planted page |",
            "| --- | --- | --- |",
        ]
        lines += [f"| {k} | {_pct(v)} | {_pct(s.pages_exact.get(k))} |" for k, v in s.pages_hit.items()]
    if s.summary_per_fact:
        lines += [
            "",
            f"- summary coverage: {_pct(s.summary_coverage)} of planted facts mentioned; "
            f"{_pct(s.summaries_complete)} of summaries mention all",
            "",
            "| fact | mentioned |",
            "| --- | --- |",
        ]
        lines += [f"| {k} | {_pct(v)} |" for k, v in s.summary_per_fact.items()]
    if s.missing:
        lines.append(f"- {len(s.missing)} labelled files got no result (first: {s.missing[0]})")
    return [*lines, ""]


def _cell(words: Sequence[str]) -> str:
    return ", ".join(w.replace("|", "\\|") for w in words) or "-"


def library_section(library: Mapping[str, Any], thumbnails: Mapping[str, str]) -> list[str]:
    """The figures only a library's own keywords give: tags the model never gives, photos of most disagreement."""
    lines = [
        "### Against the library's own keywords",
        "",
        f"- {library['photos']} photos with keywords scored; {library['unlabelled']} without keywords not scored"
        + (f"; {library['unmapped']} keywords mapped to nothing by the synonyms" if library["unmapped"] else ""),
    ]
    never = library["never_given"]
    if never:
        shown = ", ".join(f"{n['tag']} ({n['photos']})" for n in never[:30])
        more = f" and {len(never) - 30} more" if len(never) > 30 else ""
        lines.append(f"- library tags the model never gave (photos): {shown}{more}")
    if library["disagreements"]:
        lines += [
            "",
            "| photo | | overlap | library only | model only |",
            "| --- | --- | --- | --- | --- |",
        ]
        for d in library["disagreements"]:
            thumb = f"![]({thumbnails[d['path']]})" if d["path"] in thumbnails else ""
            lines.append(
                f"| `{d['path']}` | {thumb} | {_pct(d['overlap'])} | {_cell(d['missed'])} | {_cell(d['extra'])} |"
            )
    return [*lines, ""]


def markdown(
    names: Sequence[str],
    scores: Sequence[Scores],
    comparison: Comparison | None,
    failures: list[str],
    *,
    libraries: Sequence[Mapping[str, Any]] = (),
    thumbnails: Mapping[str, str] | None = None,
) -> str:
    """The report; ``libraries`` (one per side, with ``--labels-from xmp``) adds the library's own figures."""
    lines = ["# vlbatch eval", ""]
    for i, (name, s) in enumerate(zip(names, scores, strict=True)):
        lines += _scores(name, s)
        if i < len(libraries):
            lines += library_section(libraries[i], thumbnails or {})
    if comparison is not None:
        lines += [
            "## Agreement",
            "",
            f"- {comparison.items - len(comparison.differing)} of {comparison.items} items agree "
            f"({_pct(comparison.agreement)})",
        ]
        for d in comparison.differing[:20]:
            lines.append(f"- `{d['path']}`: A {d['a']!r}, B {d['b']!r}")
        if len(comparison.differing) > 20:
            lines.append(f"- ... {len(comparison.differing) - 20} more in the JSON report")
        lines.append("")
    lines.append("**FAIL**: " + "; ".join(failures) if failures else "**PASS**")
    return "\n".join(lines) + "\n"
