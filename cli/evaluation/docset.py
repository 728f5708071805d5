"""A seeded set of multi-page documents with planted facts, for ``vlbatch eval`` on the document pipelines.

Each document is an invoice, purchase order or service agreement of a few pages of neutral filler text.
Six fields (reference, issue and due date, seller, buyer, total) are each printed once, on a page drawn
at random, and every page names its own contact person. The labels record the document's kind (for
classify), the field values (extract's exact-match), the page each value is on (extract's page
provenance) and every planted value as a fact a summary should mention (summarize's coverage).
Formats rotate through PDF, DOCX and plain text with form feeds, written with the base dependencies only
(the PDF by hand: one Helvetica text layer per page, which the product's PDF reader extracts).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli.evaluation.labels import Expected, write_labels

KINDS = ("invoice", "purchase order", "service agreement")
FORMATS = ("pdf", "docx", "txt")
_PREFIX = {"invoice": "INV", "purchase order": "PO", "service agreement": "SA"}
COMPANIES = (
    "Harbour Logistics Ltd",
    "Northwind Traders",
    "Bluefield Analytics",
    "Copperleaf Printing",
    "Granite Peak Builders",
    "Silverline Couriers",
    "Meadowbrook Foods",
    "Ironbridge Engineering",
    "Lakeside Medical Supplies",
    "Redwood Office Furniture",
    "Summit Cloud Services",
    "Orchard Lane Bakery",
)
PEOPLE = (
    "Marta Kowalski",
    "Jonas Lindqvist",
    "Aiko Tanaka",
    "Rafael Moreno",
    "Priya Raman",
    "Samuel Okafor",
    "Elena Petrova",
    "Lucas Ferreira",
    "Hannah Becker",
    "Tomasz Nowak",
    "Grace Mensah",
    "Oliver Hughes",
    "Ines Castillo",
    "Yusuf Demir",
    "Clara Rossi",
    "Mateo Silva",
    "Freya Johansson",
    "Daniel Cohen",
)
# Filler: no names, no numbers, so a planted value is printed on its page only.
_FILLER = (
    "The parties keep written records of every delivery for audit purposes.",
    "Goods remain the property of the supplier until payment has been received in full.",
    "Any change to the agreed scope must be confirmed in writing by both parties.",
    "Complaints about damaged goods are to be raised within the inspection period.",
    "The customer provides safe access to the site during normal working hours.",
    "Prices include packaging but exclude any customs duties that may apply.",
    "Each shipment is accompanied by a delivery note listing the items sent.",
    "The supplier may subcontract parts of the work with prior notice.",
    "Confidential information exchanged under this document stays confidential.",
    "Late payments may incur interest at the statutory rate.",
    "Both parties appoint a contact person for day to day questions.",
    "Notices are valid when sent to the addresses stated in this document.",
    "The service levels described in the annex apply for the whole term.",
    "Spare parts are held in stock for the duration of the maintenance period.",
    "Invoices that are disputed in good faith are not considered late.",
    "The supplier insures the goods while they are in transit.",
)
FIELDS = ("reference", "issue_date", "due_date", "seller", "buyer", "total_amount")
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reference": {"type": "string", "maxLength": 16, "description": "The document's reference number."},
        "issue_date": {"type": "string", "maxLength": 10, "description": "Date of issue, YYYY-MM-DD."},
        "due_date": {"type": "string", "maxLength": 10, "description": "Date payment is due, YYYY-MM-DD."},
        "seller": {"type": "string", "maxLength": 40, "description": "The company that issued the document."},
        "buyer": {"type": "string", "maxLength": 40, "description": "The company the document is addressed to."},
        "total_amount": {"type": "number", "description": "Total amount due in EUR."},
    },
}
_WRAP = 90  # characters per PDF line


@dataclass(frozen=True)
class PlantedDocument:
    """One generated document: its pages (paragraphs per page) and what was planted where."""

    name: str  # file stem
    kind: str
    fmt: str
    pages: list[list[str]]
    fields: dict[str, Any]
    field_pages: dict[str, int]
    facts: dict[str, list[str]] = field(default_factory=dict)


_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


def _date_spellings(d: dt.date) -> list[str]:
    """ISO as printed, and the two English long forms a summary may use (not the locale's ``%B``)."""
    month = _MONTHS[d.month - 1]
    return [d.isoformat(), f"{d.day} {month} {d.year}", f"{month} {d.day}, {d.year}"]


def planted_document(index: int, *, seed: int, min_pages: int = 3, max_pages: int = 6) -> PlantedDocument:
    """Document ``index`` of the set made with ``seed``: the same arguments give the same document."""
    rng = random.Random(seed * 1_000_003 + index)
    kind = KINDS[index % len(KINDS)]
    n_pages = rng.randint(min_pages, max_pages)
    seller, buyer = rng.sample(COMPANIES, 2)
    issued = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(700))
    due = issued + dt.timedelta(days=rng.choice((14, 30, 45, 60)))
    total = rng.randrange(100_000, 9_999_999) / 100  # 1,000.00 .. 99,999.99 EUR
    reference = f"{_PREFIX[kind]}-{rng.randrange(10_000, 99_999)}"
    values: dict[str, Any] = {
        "reference": reference,
        "issue_date": issued.isoformat(),
        "due_date": due.isoformat(),
        "seller": seller,
        "buyer": buyer,
        "total_amount": total,
    }
    sentences = {
        "reference": f"Reference number of this {kind}: {reference}.",
        "issue_date": f"Date of issue: {issued.isoformat()}.",
        "due_date": f"Payment is due on {due.isoformat()}.",
        "seller": f"This {kind} is issued by {seller}.",
        "buyer": f"It is addressed to {buyer}.",
        "total_amount": f"Total amount due: EUR {total:,.2f}.",
    }
    where = {name: rng.randint(1, n_pages) for name in FIELDS}
    contacts = rng.sample(PEOPLE, n_pages)
    facts: dict[str, list[str]] = {
        "reference": [reference],
        "issue_date": _date_spellings(issued),
        "due_date": _date_spellings(due),
        "seller": [seller],
        "buyer": [buyer],
        "total_amount": [f"{total:,.2f}"],
    }
    pages: list[list[str]] = []
    for n in range(1, n_pages + 1):
        filler = rng.sample(_FILLER, 6)
        paragraphs = [f"{kind.title()}, page {n} of {n_pages}", " ".join(filler[:3])]
        paragraphs += [sentences[name] for name in FIELDS if where[name] == n]
        paragraphs += [f"Contact person for this section: {contacts[n - 1]}.", " ".join(filler[3:])]
        pages.append(paragraphs)
        facts[f"contact_page_{n}"] = [contacts[n - 1]]
    fmt = FORMATS[index % len(FORMATS)]
    name = f"{index:03d}_{kind.replace(' ', '_')}"
    return PlantedDocument(name, kind, fmt, pages, values, where, facts)


def pdf_bytes(pages: Sequence[Sequence[str]]) -> bytes:
    """A minimal PDF: one A4 page per entry, its paragraphs as lines of Helvetica (a real text layer)."""

    def literal(line: str) -> str:
        return "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"

    kids = [4 + 2 * i for i in range(len(pages))]
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(pages)} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    for kid, paragraphs in zip(kids, pages, strict=True):
        lines = [line for p in paragraphs for line in [*textwrap.wrap(p, _WRAP), ""]]
        ops = " ".join(f"{literal(line)} Tj T*" for line in lines)
        stream = f"BT /F1 10 Tf 14 TL 50 800 Td {ops} ET".encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {kid + 1} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _write_docx(path: Path, pages: Sequence[Sequence[str]]) -> None:
    import docx

    document = docx.Document()
    for n, paragraphs in enumerate(pages):
        if n:
            document.add_page_break()
        for p in paragraphs:
            document.add_paragraph(p)
    document.save(str(path))


def write_document(folder: Path, doc: PlantedDocument) -> Path:
    """Write ``doc`` in its format into ``folder``; returns the file."""
    path = folder / f"{doc.name}.{doc.fmt}"
    if doc.fmt == "pdf":
        path.write_bytes(pdf_bytes(doc.pages))
    elif doc.fmt == "docx":
        _write_docx(path, doc.pages)
    else:  # form feeds separate the pages of a text file
        path.write_text("\f".join("\n\n".join(p) + "\n" for p in doc.pages), encoding="utf-8")
    return path


def write_document_set(folder: Path, *, count: int, seed: int = 0, min_pages: int = 3, max_pages: int = 6) -> Path:
    """``count`` documents, ``labels.jsonl`` (kind, fields, pages, facts) and ``schema.json`` (the fields to
    extract) in ``folder``; returns the labels file.
    """
    if count < 1 or not 1 <= min_pages <= max_pages:
        raise ValueError(f"need count >= 1 and 1 <= min_pages <= max_pages, got {count}, {min_pages}, {max_pages}")
    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for i in range(count):
        doc = planted_document(i, seed=seed, min_pages=min_pages, max_pages=max_pages)
        path = write_document(folder, doc)
        records.append(
            Expected(
                path.resolve(),
                label=doc.kind,
                fields=doc.fields,
                pages={k: (v,) for k, v in doc.field_pages.items()},
                facts={k: tuple(v) for k, v in doc.facts.items()},
            )
        )
    (folder / "schema.json").write_text(json.dumps(SCHEMA, indent=2) + "\n")
    labels = folder / "labels.jsonl"
    write_labels(labels, records)
    return labels
