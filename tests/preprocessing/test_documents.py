"""Tests for preprocessing.documents: every format on files the tests build, scans, and every bad-input code."""

from __future__ import annotations

import hashlib
import io
import random
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from preprocessing.documents import (
    DocumentLimits,
    content_hash,
    detect_format,
    hash_file,
    load_document,
    parse_document,
    render_page,
    replace_page_text,
)
from preprocessing.input_errors import InputError

PAGE_TEXT = [
    "Supply agreement between Acme Corporation and Beta Limited, signed on 3 March 2025.",
    "The buyer pays EUR 12,500 within thirty days of each delivery.",
    "Either party may terminate with ninety days written notice.",
]


def _pdf(pages: Sequence[str | None], *, scan_size: tuple[int, int] = (1200, 1600)) -> bytes:
    """A PDF with one text page per string; ``None`` is a page holding only a picture of text (a scan)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=A4)
    for text in pages:
        if text is None:
            scan = Image.new("RGB", scan_size, "white")
            ImageDraw.Draw(scan).rectangle((100, 100, 1100, 300), fill="black")
            c.drawImage(ImageReader(scan), 0, 0, width=A4[0], height=A4[1])
        else:
            c.drawString(72, 760, text)
        c.showPage()
    c.save()
    return buf.getvalue()


def _code(exc_info: pytest.ExceptionInfo[InputError]) -> str:
    return exc_info.value.code


# ------------------------------------------------------------------------------------------------ PDF


def test_pdf_text_stays_on_its_page(tmp_path: Path) -> None:
    data = _pdf(PAGE_TEXT)
    path = tmp_path / "contract.pdf"
    path.write_bytes(data)
    doc = load_document(path)
    assert doc.format == "pdf" and doc.page_count == 3 and doc.source == str(path)
    assert [p.number for p in doc.pages] == [1, 2, 3]
    for page, expected in zip(doc.pages, PAGE_TEXT, strict=True):
        assert page.text == expected and not page.needs_ocr
        others = [t for t in PAGE_TEXT if t != expected]
        assert not any(o in page.text for o in others)
    assert doc.content_hash == hashlib.sha256(data).hexdigest() == hash_file(path)
    assert doc.size_bytes == len(data)


def test_scanned_page_needs_ocr_and_renders_within_budget(tmp_path: Path) -> None:
    path = tmp_path / "mixed.pdf"
    path.write_bytes(_pdf([PAGE_TEXT[0], None, PAGE_TEXT[2]]))
    doc = load_document(path)
    assert [p.needs_ocr for p in doc.pages] == [False, True, False]
    assert doc.ocr_pages == [2] and doc.pages[1].text == ""
    for budget in (28 * 28 * 64, 200_000, 1_003_001):
        img = render_page(path, 2, max_pixels=budget)
        assert img.mode == "RGB"
        assert img.width * img.height <= budget
        assert img.width * img.height >= budget * 0.9  # the budget is used, not wasted
        assert abs(img.height / img.width - 842 / 595) < 0.02  # A4 portrait kept
    # The scan's black bar is near the top of the page: the render shows it there.
    img = render_page(path.read_bytes(), 2, max_pixels=200_000).convert("L")
    top = img.crop((0, 0, img.width, img.height // 4))
    bottom = img.crop((0, img.height // 2, img.width, img.height))
    assert min(top.getdata()) < 50 and min(bottom.getdata()) > 200
    done = replace_page_text(doc, {2: "  Transcribed page two.  "})
    assert done.ocr_pages == [] and done.pages[1].text == "Transcribed page two."
    assert doc.ocr_pages == [2]  # the original is untouched
    with pytest.raises(ValueError, match="pages \\[7\\]"):
        replace_page_text(doc, {7: "x"})


def test_image_only_pdf_from_pillow_is_all_scans(tmp_path: Path) -> None:
    pages = [Image.new("RGB", (400, 500), "white") for _ in range(2)]
    buf = io.BytesIO()
    pages[0].save(buf, format="PDF", save_all=True, append_images=pages[1:])
    doc = parse_document(buf.getvalue(), fmt="pdf", source="scan.pdf")
    assert doc.ocr_pages == [1, 2]


def test_a_page_pypdf_cannot_read_goes_to_ocr(monkeypatch: pytest.MonkeyPatch) -> None:
    from pypdf import PageObject

    real = PageObject.extract_text
    calls = iter(range(100))

    def flaky(self: PageObject, *args: object, **kwargs: object) -> str:
        if next(calls) == 1:
            raise KeyError("/Font")  # the kind of error a broken page raises deep inside pypdf
        return real(self)

    monkeypatch.setattr(PageObject, "extract_text", flaky)
    doc = parse_document(_pdf(PAGE_TEXT), fmt="pdf", source="flaky.pdf")
    assert [p.needs_ocr for p in doc.pages] == [False, True, False]
    assert doc.pages[0].text == PAGE_TEXT[0] and doc.pages[2].text == PAGE_TEXT[2]


def test_inline_image_scan_but_not_blank_or_short_text_pages() -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=A4)
    c.drawInlineImage(Image.new("RGB", (60, 80), "gray"), 0, 0, A4[0], A4[1])  # BI ... ID ... EI
    c.showPage()
    c.showPage()  # blank: nothing to transcribe
    c.drawString(72, 700, "p. 3")  # short text, no image: a nearly empty page, not a scan
    c.showPage()
    c.save()
    doc = parse_document(buf.getvalue(), fmt="pdf", source="inline.pdf")
    assert [p.needs_ocr for p in doc.pages] == [True, False, False]
    assert doc.pages[2].text == "p. 3"


def test_render_page_errors(tmp_path: Path) -> None:
    path = tmp_path / "a.pdf"
    path.write_bytes(_pdf(PAGE_TEXT))
    with pytest.raises(InputError) as exc:
        render_page(path, 4, max_pixels=100_000)
    assert _code(exc) == "page_out_of_range"
    with pytest.raises(InputError) as exc:
        render_page(b"%PDF-1.4 not really", 1, max_pixels=100_000)
    assert _code(exc) == "pdf_malformed"
    with pytest.raises(ValueError, match="max_pixels"):
        render_page(path, 1, max_pixels=10)


def _encrypted(data: bytes, user: str, owner: str) -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user, owner_password=owner, algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_encrypted_pdf() -> None:
    data = _pdf(PAGE_TEXT)
    with pytest.raises(InputError) as exc:
        parse_document(_encrypted(data, "secret", "owner"), fmt="pdf", source="locked.pdf")
    assert _code(exc) == "pdf_encrypted" and "locked.pdf" in exc.value.message
    with pytest.raises(InputError) as exc:
        render_page(_encrypted(data, "secret", "owner"), 1, max_pixels=100_000)
    assert _code(exc) == "pdf_encrypted"
    # Restrictions-only encryption (empty user password) is readable, and renders.
    restricted = _encrypted(data, "", "owner")
    doc = parse_document(restricted, fmt="pdf", source="restricted.pdf")
    assert doc.pages[1].text == PAGE_TEXT[1]
    assert render_page(restricted, 2, max_pixels=100_000).width > 0


@pytest.mark.parametrize(
    "blob",
    [b"%PDF-1.4\nnothing else here\n", b"not a pdf at all, just words", "truncated"],
)
def test_malformed_pdf(blob: bytes | str) -> None:
    data = _pdf(PAGE_TEXT)[:600] if blob == "truncated" else blob
    assert isinstance(data, bytes)
    with pytest.raises(InputError) as exc:
        parse_document(data, fmt="pdf", source="bad.pdf")
    assert _code(exc) == "pdf_malformed"


def test_pdf_limits_and_blank_pages(tmp_path: Path) -> None:
    data = _pdf(PAGE_TEXT)
    with pytest.raises(InputError) as exc:
        parse_document(data, fmt="pdf", source="long.pdf", limits=DocumentLimits(max_pages=2))
    assert _code(exc) == "too_many_pages"
    path = tmp_path / "big.pdf"
    path.write_bytes(data)
    with pytest.raises(InputError) as exc:
        load_document(path, limits=DocumentLimits(max_bytes=len(data) - 1))
    assert _code(exc) == "file_too_large"
    assert load_document(path, limits=DocumentLimits(max_bytes=len(data))).page_count == 3
    with pytest.raises(InputError) as exc:
        parse_document(_pdf(["", ""]), fmt="pdf", source="blank.pdf")
    assert _code(exc) == "empty_document"


# ----------------------------------------------------------------------------------------------- DOCX


def _docx() -> bytes:
    import docx

    d = docx.Document()
    d.add_heading("Master Services Agreement", level=0)
    d.add_heading("Scope", level=1)
    d.add_paragraph("The supplier maintains the records archive.")
    d.add_paragraph("Monthly reports", style="List Bullet")
    d.add_page_break()
    d.add_heading("Payment terms", level=2)
    d.add_paragraph("Invoices are due within 30 days.")
    table = d.add_table(rows=2, cols=2)
    for r, row in enumerate([("Item", "Amount"), ("Storage", "EUR 900")]):
        for col, text in enumerate(row):
            table.cell(r, col).text = text
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def test_docx_headings_lists_tables_and_page_breaks(tmp_path: Path) -> None:
    path = tmp_path / "msa.docx"
    path.write_bytes(_docx())
    doc = load_document(path)
    assert doc.format == "docx" and doc.page_count == 2
    first, second = (p.text.split("\n") for p in doc.pages)
    assert first[0] == "# Master Services Agreement"
    assert "# Scope" in first and "- Monthly reports" in first
    assert "The supplier maintains the records archive." in first
    assert "## Payment terms" in second and "Invoices are due within 30 days." in second
    assert "| Storage | EUR 900 |" in second
    assert not any("Payment" in line for line in first)


def test_docx_rendered_page_breaks_count_once_after_a_hard_break() -> None:
    import docx
    from docx.oxml import OxmlElement

    d = docx.Document()
    d.add_paragraph("Page one text.")
    d.add_page_break()
    # Word, on saving, marks where each laid-out page starts; after a hard break that is the same page.
    after_break = d.add_paragraph("Page two text.")
    after_break.runs[0]._r.insert(0, OxmlElement("w:lastRenderedPageBreak"))
    flowed = d.add_paragraph("Page two continues")
    flowed.runs[0]._r.append(OxmlElement("w:lastRenderedPageBreak"))  # the layout moved on mid-paragraph
    flowed.add_run(" onto page three.")
    merged = d.add_table(rows=1, cols=3)
    merged.cell(0, 0).merge(merged.cell(0, 1)).text = "Wide"
    merged.cell(0, 2).text = "Narrow"
    buf = io.BytesIO()
    d.save(buf)
    doc = parse_document(buf.getvalue(), fmt="docx", source="flow.docx")
    assert [p.text for p in doc.pages] == [
        "Page one text.",
        "Page two text.\n\nPage two continues",
        "onto page three.\n\n| Wide | Narrow |",
    ]


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, payload in members.items():
            zf.writestr(name, payload)
    return buf.getvalue()


def test_docx_zip_bomb_refused_before_inflating() -> None:
    # 2 MB of zeros inflates past a 1 MB limit.
    small_limit = DocumentLimits(max_unzipped_bytes=1_000_000)
    with pytest.raises(InputError) as exc:
        parse_document(_zip({"word/document.xml": b"\0" * 2_000_000}), fmt="docx", source="b.docx", limits=small_limit)
    assert _code(exc) == "docx_too_large"
    # 20 MB of one byte compresses about 1000:1: refused by ratio under the default size limit.
    bomb = _zip({"[Content_Types].xml": b"<x/>", "word/document.xml": b"a" * 20_000_000})
    assert len(bomb) < 100_000
    with pytest.raises(InputError) as exc:
        parse_document(bomb, fmt="docx", source="bomb.docx")
    assert _code(exc) == "docx_too_large" and "ratio" in exc.value.message


@pytest.mark.parametrize(
    ("blob", "what"),
    [(b"plain text named docx", "not a zip"), (_zip({"content.xml": b"<x/>"}), "no word/document.xml")],
)
def test_docx_malformed(blob: bytes, what: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_document(blob, fmt="docx", source="x.docx")
    assert _code(exc) == "docx_malformed" and what in exc.value.message


# --------------------------------------------------------------------------------- text, Markdown, HTML


def test_text_encodings_and_form_feed_pages() -> None:
    german = "Der Käufer zahlt die Gebühr für die Übergabe der Maße und Größen an der Straße."
    for encoding in ("utf-8", "utf-8-sig", "utf-16", "cp1252"):
        doc = parse_document(german.encode(encoding), fmt="text", source=f"{encoding}.txt")
        assert doc.pages[0].text == german, encoding
    doc = parse_document(b"first page\r\n\x0csecond page\n\n\n\nstill second\x0c", fmt="text", source="ff.txt")
    assert [p.text for p in doc.pages] == ["first page", "second page\n\nstill second", ""]


def test_markdown_kept_as_written(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_text("# Title\n\nSome *text*.\n\n## Section\n\n- item\n", encoding="utf-8")
    doc = load_document(path)
    assert doc.format == "markdown" and doc.pages[0].text == "# Title\n\nSome *text*.\n\n## Section\n\n- item"


def test_html_drops_scripts_and_keeps_structure() -> None:
    html = """<!doctype html><html><head><title>Annual  report</title><style>p {color: red}</style>
    <script>var secret = "do not index";</script></head><body><h1>Annual report</h1>
    <p>Revenue   grew&nbsp;by 4&percnt;.</p><h2>Risks</h2><ul><li>Currency</li><li>Supply</li></ul>
    <table><tr><td>Q1</td><td>10</td></tr></table><noscript>enable js</noscript></body></html>"""
    doc = parse_document(html.encode(), fmt="html", source="r.html")
    lines = doc.pages[0].text.split("\n")
    assert "# Annual report" in lines and "## Risks" in lines
    assert "Revenue grew by 4%." in lines  # source whitespace, &nbsp; included, is one space
    assert "- Currency" in lines and "- Supply" in lines
    assert any("Q1" in line and "10" in line for line in lines)
    assert "secret" not in doc.text and "color" not in doc.text and "enable js" not in doc.text
    assert lines.count("# Annual report") == 1  # the <title> is not repeated when the page starts with it
    unclosed = parse_document(b"<html><head><title>T</title><body><p>Body text</p>", fmt="html", source="u.html")
    assert "Body text" in unclosed.text


@pytest.mark.parametrize(
    "blob",
    [
        b"ID3\x00\x00\x00binary audio frame\x00",
        bytes(b for b in random.Random(7).randbytes(4000) if b),  # no NULs, still not text
        b"\x01\x02\x03\x04\x05 mostly control \x06\x07\x08\x0e\x0f\x10\x11\x12\x13\x14\x15\x16",
        _pdf(["a pdf renamed to .txt"]),
    ],
)
def test_binary_named_txt(blob: bytes) -> None:
    with pytest.raises(InputError) as exc:
        parse_document(blob, fmt="text", source="data.txt")
    assert _code(exc) == "binary_text"


@pytest.mark.parametrize(("name", "blob"), [("e.txt", b""), ("w.md", b" \n\t\n"), ("e.html", b"<script>x</script>")])
def test_empty_documents(tmp_path: Path, name: str, blob: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(blob)
    with pytest.raises(InputError) as exc:
        load_document(path)
    assert _code(exc) == "empty_document"


def test_unsupported_and_missing(tmp_path: Path) -> None:
    for name in ("old.doc", "sheet.xlsx", "noext"):
        with pytest.raises(InputError) as exc:
            detect_format(name)
        assert _code(exc) == "unsupported_format"
    with pytest.raises(InputError, match=r"save it as \.docx"):
        detect_format("old.doc")
    assert detect_format("REPORT.PDF") == "pdf" and detect_format("a.htm") == "html"
    with pytest.raises(InputError) as exc:
        load_document(tmp_path / "gone.pdf")
    assert _code(exc) == "not_found"


def test_content_hash_tracks_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"same words")
    b.write_bytes(b"same words")
    assert load_document(a).content_hash == load_document(b).content_hash == content_hash(b"same words")
    b.write_bytes(b"same words.")
    assert load_document(b).content_hash != load_document(a).content_hash == hash_file(a)


def test_limits_validate_themselves() -> None:
    with pytest.raises(ValueError, match="max_pages=0"):
        DocumentLimits(max_pages=0)
    with pytest.raises(ValueError, match="max_zip_ratio"):
        DocumentLimits(max_zip_ratio=1)
