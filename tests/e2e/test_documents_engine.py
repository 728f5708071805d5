"""`vlbatch docs` on the real CPU engine: a multi-page PDF, a DOCX with headings, a scanned page, bad files.

Checks page provenance, chunk token counts against the model's own tokenizer, and the map-reduce tree
as stored in the database. The command runs in this process, on the run's shared engine (no load of its own).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image, ImageDraw
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from engine.runtime.runner import EngineRunner
from pipelines import summarize
from pipelines.documents_common import plan_chunks
from preprocessing.chunking import load_token_counter
from preprocessing.documents import load_document
from tests.support.engine import TEST_ENGINE
from tests.support.shared_engine import vlbatch_cli
from vlbatch.db.models import DocumentPart, Item

pytestmark = [pytest.mark.engine("shared"), pytest.mark.timeout(900)]
OPTIONS = {"max_summary_chars": 100, "overlap_tokens": 16, "max_page_visual_tokens": 64, "max_ocr_chars": 100}
PAGES = 20


def _report(path: Path) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    for n in range(1, PAGES + 1):
        for line in range(25):
            c.drawString(40, 800 - 28 * line, f"Page {n} clause {line}: the buyer pays invoice {n}-{line} in 30 days.")
        c.showPage()
    c.save()


def _scanned(path: Path) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    c.drawString(72, 760, "Cover letter: the archive contract is renewed for two years from March.")
    c.showPage()
    scan = Image.new("RGB", (600, 800), "white")
    ImageDraw.Draw(scan).rectangle((50, 50, 550, 150), fill="black")
    c.drawImage(ImageReader(scan), 0, 0, width=A4[0], height=A4[1])
    c.showPage()
    c.drawString(72, 760, "Signed by both parties on the last page.")
    c.showPage()
    c.save()


def _docx(path: Path) -> None:
    import docx

    d = docx.Document()
    d.add_heading("Master Services Agreement", level=0)
    d.add_heading("Scope", level=1)
    d.add_paragraph("The supplier keeps the records archive and sends monthly reports.")
    d.add_heading("Payment", level=1)
    d.add_paragraph("Invoices are due within 30 days of receipt.")
    d.save(str(path))


def test_documents_are_summarized_with_page_provenance_and_a_reduce_tree(
    tmp_path: Path, tiny_model: Path, shared_engine: EngineRunner
) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    _report(inbox / "report.pdf")
    _scanned(inbox / "scanned.pdf")
    _docx(inbox / "agreement.docx")
    (inbox / "binary.txt").write_bytes(bytes(range(256)) * 8)
    (inbox / "empty.md").write_text("   \n")
    db = tmp_path / "docs.db"
    out, per_doc = tmp_path / "out.jsonl", tmp_path / "json"
    proc = vlbatch_cli(
        [
            "docs",
            str(inbox),
            "--model",
            str(tiny_model),
            "--task",
            "summarize",
            "--options",
            json.dumps(OPTIONS),
            "--engine",
            json.dumps(TEST_ENGINE),  # the shared engine's own (a lent engine keeps its arguments)
            "--out",
            str(out),
            "--output-dir",
            str(per_doc),
        ],
        env={"VLBATCH_DATABASE_URL": f"sqlite:///{db}"},
    )
    assert proc.exit_code == 0, proc.output[-4000:]
    assert "job " in proc.stdout and "3 succeeded, 2 failed; 5 rows" in proc.stdout
    rows = {Path(r["ref"]).name: r for r in map(json.loads, out.read_text().splitlines())}
    assert {n: r["error_code"] for n, r in rows.items() if r["status"] == "failed"} == {
        "binary.txt": "binary_text",
        "empty.md": "empty_document",
    }
    report = rows["report.pdf"]["output"]
    assert report["document"]["pages"] == PAGES and report["pages"] == list(range(1, PAGES + 1))
    assert report["map_parts"] == report["document"]["chunks"] > 2
    levels = report["reduce_levels"]
    assert levels[-1] == 1 and all(a > b for a, b in zip([report["map_parts"], *levels], levels, strict=False))
    assert rows["scanned.pdf"]["output"]["document"]["ocr_pages"] == [2]
    assert rows["agreement.docx"]["status"] == "succeeded"
    assert sorted(p.name for p in per_doc.iterdir()) == ["agreement.docx.json", "report.pdf.json", "scanned.pdf.json"]

    # The stored map parts are the chunks the tokenizer gives for this engine's context, page by page.
    count = load_token_counter(tiny_model)
    opts = summarize.Options(**OPTIONS)
    doc = load_document(inbox / "report.pdf")
    chunks = plan_chunks(
        doc,
        count,
        opts,
        max_model_len=shared_engine.config.max_model_len,
        system=summarize.SYSTEM_PREFIX,
        build_user=lambda c: summarize.map_prompt(c, opts, total_pages=doc.page_count),
        max_output_tokens=summarize.max_output_tokens(opts),
    )
    eng = create_engine(f"sqlite:///{db}")
    with Session(eng) as s:
        item = s.scalars(select(Item).where(Item.ref.like("%report.pdf"))).one()
        parts = list(s.scalars(select(DocumentPart).where(DocumentPart.item_id == item.id)))
        scan_item = s.scalars(select(Item).where(Item.ref.like("%scanned.pdf"))).one()
        ocr = [
            p.idx
            for p in s.scalars(select(DocumentPart).where(DocumentPart.item_id == scan_item.id))
            if p.stage == "ocr"
        ]
    eng.dispose()
    maps = sorted((p for p in parts if p.stage == "map"), key=lambda p: p.idx)
    assert [(p.idx, p.pages, p.input_tokens) for p in maps] == [(c.index, list(c.pages), c.token_count) for c in chunks]
    assert all(c.token_count == count(c.text) for c in chunks)
    assert sorted({pg for p in maps for pg in p.pages}) == list(range(1, PAGES + 1))
    reduces = [p for p in parts if p.stage.startswith("reduce")]
    assert sum(1 for p in reduces if p.stage == f"reduce{len(levels)}") == 1  # one final summary
    final = next(p for p in reduces if p.stage == f"reduce{len(levels)}")
    assert final.output == {"summary": report["summary"]} and final.pages == report["pages"]
    assert ocr == [2]
