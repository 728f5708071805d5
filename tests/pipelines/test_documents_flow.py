"""From a built PDF to prompts: ingestion, OCR hand-back, chunk planning per pipeline and prompt sizes,
with the tiny model's tokenizer.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from pipelines import classify, extract, summarize
from pipelines.documents_common import context_advice, plan_chunks, prompt_overhead
from preprocessing.chunking import Passage, load_token_counter
from preprocessing.documents import load_document, replace_page_text
from preprocessing.input_errors import InputError


def _report(path: Path, n_pages: int, scan_at: int) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    for n in range(1, n_pages + 1):
        if n == scan_at:
            c.drawImage(ImageReader(Image.new("L", (300, 400), 255)), 0, 0, width=A4[0], height=A4[1])
        else:
            for line in range(30):
                c.drawString(40, 800 - 24 * line, f"Page {n} line {line}: the buyer pays invoice {n}-{line} on time.")
        c.showPage()
    c.save()


def test_pdf_to_prompts_for_every_pipeline(tmp_path: Path, tiny_model: Path) -> None:
    count = load_token_counter(tiny_model)
    path = tmp_path / "report.pdf"
    _report(path, 12, scan_at=5)
    doc = load_document(path)
    assert doc.ocr_pages == [5]
    schema = {"type": "object", "properties": {"invoices": {"type": "array", "items": {"type": "string"}}}}
    cases: list[tuple[str, Callable[[Passage], str], int, object]] = []
    s_opts = summarize.Options(max_summary_chars=200, overlap_tokens=50)
    cases.append(
        (
            summarize.SYSTEM_PREFIX,
            lambda c: summarize.map_prompt(c, s_opts),
            summarize.max_output_tokens(s_opts),
            s_opts,
        )
    )
    e_opts = extract.Options(json_schema=schema, max_array_items=5, max_string_chars=30)
    cases.append(
        (extract.SYSTEM_PREFIX, lambda c: extract.map_prompt(c, e_opts), extract.max_output_tokens(e_opts), e_opts)
    )
    c_opts = classify.Options(labels=["report", "invoice"])
    cases.append(
        (classify.SYSTEM_PREFIX, lambda c: classify.map_prompt(c, c_opts), classify.max_output_tokens(c_opts), c_opts)
    )
    with pytest.raises(ValueError, match="need OCR first"):
        plan_chunks(
            doc,
            count,
            s_opts,
            max_model_len=4096,
            system=cases[0][0],
            build_user=cases[0][1],
            max_output_tokens=cases[0][2],
        )
    done = replace_page_text(doc, {5: "Page 5 transcribed: the buyer pays invoice 5-0 on time."})
    for system, build, out_tokens, opts in cases:
        assert isinstance(opts, summarize.Options | extract.Options | classify.Options)
        chunks = plan_chunks(
            done, count, opts, max_model_len=4096, system=system, build_user=build, max_output_tokens=out_tokens
        )
        assert len(chunks) > 1
        assert {p for c in chunks for p in c.pages} == set(range(1, 13))
        for c in chunks:
            # The whole request fits the context: system + user prompt + the answer's bound.
            prompt = count(system) + count(build(c))
            assert prompt + out_tokens <= 4096
            assert prompt <= prompt_overhead(count, system, build) + c.token_count
    # Skipping scans instead: page 5 is simply absent.
    skip = summarize.Options(ocr=False)
    chunks = plan_chunks(
        doc, count, skip, max_model_len=4096, system=cases[0][0], build_user=cases[0][1], max_output_tokens=cases[0][2]
    )
    assert 5 not in {p for c in chunks for p in c.pages}
    with pytest.raises(ValueError, match="max_model_len=512"):
        plan_chunks(
            done,
            count,
            s_opts,
            max_model_len=512,
            system=cases[0][0],
            build_user=cases[0][1],
            max_output_tokens=cases[0][2],
        )


def test_only_scans_skipped_is_an_empty_document(tmp_path: Path, tiny_model: Path) -> None:
    count = load_token_counter(tiny_model)
    buf = io.BytesIO()
    Image.new("RGB", (200, 300), "white").save(buf, format="PDF")
    path = tmp_path / "scan.pdf"
    path.write_bytes(buf.getvalue())
    opts = summarize.Options(ocr=False, max_summary_chars=200)
    with pytest.raises(InputError) as exc:
        plan_chunks(
            load_document(path), count, opts, max_model_len=4096, system=summarize.SYSTEM_PREFIX,
            build_user=lambda c: summarize.map_prompt(c, opts), max_output_tokens=summarize.max_output_tokens(opts),
        )  # fmt: skip
    assert exc.value.code == "empty_document" and "[1]" in exc.value.message


def _plan(doc: object, count: Callable[[str], int], opts: summarize.Options, max_model_len: int) -> list[Passage]:
    return plan_chunks(
        doc,  # type: ignore[arg-type]
        count,
        opts,
        max_model_len=max_model_len,
        system=summarize.SYSTEM_PREFIX,
        build_user=lambda c: summarize.map_prompt(c, opts, total_pages=12),
        max_output_tokens=summarize.max_output_tokens(opts),
    )


def test_a_context_too_small_names_the_option_to_lower_and_the_largest_value_that_fits(
    tmp_path: Path, tiny_model: Path
) -> None:
    count = load_token_counter(tiny_model)
    path = tmp_path / "report.pdf"
    _report(path, 12, scan_at=0)
    doc = load_document(path)
    asked = summarize.Options()  # the defaults, as the docs' document example (docs/documents.md) sends them
    with pytest.raises(ValueError) as exc:
        _plan(doc, count, asked, 4096)  # the tiny model's own context
    pipeline = summarize.PIPELINE
    advice = context_advice(pipeline, asked, count, str(exc.value), max_model_len=4096, total_pages=12)
    assert advice.startswith(str(exc.value))
    found = re.search(r"; or lower max_summary_chars to (\d+) or less \(the job asked 1200\)$", advice)
    assert found is not None, advice
    fit = int(found.group(1))
    assert _plan(doc, count, summarize.Options(max_summary_chars=fit), 4096)  # the value named fits
    with pytest.raises(ValueError):
        _plan(doc, count, summarize.Options(max_summary_chars=fit + 1), 4096)  # and is the largest that does
    tiny = summarize.Options(max_summary_chars=100)  # the smallest value allowed fits no 256-token context: only
    with pytest.raises(ValueError) as small:  # a longer context helps, and no value is named
        _plan(doc, count, tiny, 256)
    assert context_advice(pipeline, tiny, count, str(small.value), max_model_len=256, total_pages=12) == str(
        small.value
    )
    labels = classify.Options(labels=["report", "invoice"])  # no single option bounds a label's answer
    assert context_advice(classify.PIPELINE, labels, count, "r", max_model_len=256, total_pages=12) == "r"
