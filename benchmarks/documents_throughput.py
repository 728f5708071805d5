"""Documents/s and prompt tokens/s of a batch of 100-page PDFs through the embedded document path.

Writes the tiny random-weight model and N PDFs of PAGES pages (25 lines each), summarizes them in this
process on the CPU engine (SQLite, no broker) and prints the rates over the run, engine load excluded.
Summaries are held to 120 characters: within the grammar's bounded repeat, so the random model's answers
close; a longer bound leaves a random model writing until max_tokens.

Usage: python benchmarks/documents_throughput.py [N_DOCUMENTS] [PAGES] [MAX_MODEL_LEN]   (defaults 2 100 4096)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from sqlalchemy import func, select


def write_pdf(path: Path, pages: int, seed: int) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    for n in range(1, pages + 1):
        for line in range(25):
            c.drawString(40, 800 - 28 * line, f"Doc {seed} page {n} clause {line}: the buyer pays invoice {n}-{line}.")
        c.showPage()
    c.save()


def main() -> None:
    n_docs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    pages = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    max_len = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
    from engine.tiny_model import write_tiny_qwen2_vl
    from vlbatch.db.models import DocumentPart
    from vlbatch.db.session import make_engine, make_sessionmaker
    from vlbatch.settings import Settings
    from worker.embedded import run_documents

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = write_tiny_qwen2_vl(work / "model")
        inbox = work / "inbox"
        inbox.mkdir()
        for i in range(n_docs):
            write_pdf(inbox / f"doc{i}.pdf", pages, i)
        url = f"sqlite:///{work / 'bench.db'}"
        engine = {
            "dtype": "float32",
            "max_model_len": max_len,
            "kv_cache_memory_bytes": 1 << 30,
            "enforce_eager": True,
            "max_num_seqs": 64,
        }
        settings = Settings(database_url=url, engine=engine, document_chunk_size=2)
        run = run_documents(
            settings,
            directory=inbox,
            model_dir=model,
            pipeline="summarize",
            options={"max_summary_chars": 120},
            out=work / "out.jsonl",
        )
        with make_sessionmaker(make_engine(url))() as s:
            prompt, completion, parts = s.execute(
                select(func.sum(DocumentPart.prompt_tokens), func.sum(DocumentPart.completion_tokens), func.count())
            ).one()
        failures = [r for r in map(json.loads, (work / "out.jsonl").read_text().splitlines()) if r["error_code"]]
        for r in failures[:3]:
            print(f"FAILED {r['ref']}: {r['error_code']}: {r['error_message']}")
        if not parts:
            raise SystemExit("no model calls were made")
        dt = run.run_seconds
        print(
            f"{run.counts['succeeded']}/{n_docs} documents of {pages} pages succeeded, {parts} model calls, "
            f"max_model_len {max_len}; engine load {run.load_seconds:.1f} s (excluded)"
        )
        print(
            f"{n_docs / dt:.3f} documents/s, {n_docs * pages / dt:.1f} pages/s, {prompt / dt:,.0f} prompt tokens/s, "
            f"{completion / dt:,.0f} completion tokens/s ({prompt:,} prompt + {completion:,} completion tokens "
            f"in {dt:.1f} s)"
        )


if __name__ == "__main__":
    main()
