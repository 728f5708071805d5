"""Tests for preprocessing.chunking with the tiny model's real tokenizer: exact token counts, budgets,
page provenance, overlap, heading boundaries and hard splits.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from preprocessing.chunking import (
    CountTokens,
    Passage,
    chunk_budget,
    chunk_document,
    chunk_pages,
    load_token_counter,
    token_counter,
)
from preprocessing.documents import Document, Page

MARK = re.compile(r"\bp(\d+)s(\d+)\b")


@pytest.fixture(scope="module")
def count(tiny_model: Path) -> CountTokens:
    return load_token_counter(tiny_model)


def _pages(n_pages: int, sentences: int, *, heading_every: int = 0) -> list[Page]:
    """Pages of paragraphs whose sentences carry a marker ``p<page>s<k>`` naming where they were written."""
    pages = []
    for n in range(1, n_pages + 1):
        paras = []
        for k in range(sentences):
            if heading_every and k % heading_every == 0:
                paras.append(f"## Section p{n}s{k}")
            paras.append(f"The buyer pays invoice p{n}s{k} within thirty days of delivery. Hello world.")
        pages.append(Page(n, "\n\n".join(paras)))
    return pages


def _marks(text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in MARK.findall(text)]


def _check(chunks: list[Passage], count: CountTokens, max_tokens: int) -> None:
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert c.token_count == count(c.text) <= max_tokens
        assert c.pages == tuple(sorted({p for p, _ in _marks(c.text)})), c.text
        assert c.first_page == c.pages[0] and c.last_page == c.pages[-1]


def test_counters_agree_between_tokenizers_and_transformers(tiny_model: Path, count: CountTokens) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    fast = token_counter(Tokenizer.from_file(str(tiny_model / "tokenizer.json")))
    hf = token_counter(AutoTokenizer.from_pretrained(str(tiny_model)))
    for text in ("Hello world.", "Käufer zahlt 12.500 EUR", "", "p3s14 " * 40):
        assert count(text) == fast(text) == hf(text)
    assert count("Hello world.") < len("Hello world.")  # a real BPE, not characters
    pages = _pages(2, 6)
    by_object = chunk_pages(pages, AutoTokenizer.from_pretrained(str(tiny_model)), max_tokens=100)
    assert by_object == chunk_pages(pages, count, max_tokens=100)


@pytest.mark.parametrize(("max_tokens", "overlap"), [(64, 0), (200, 0), (200, 40), (1000, 100)])
def test_budget_exact_counts_and_page_provenance(count: CountTokens, max_tokens: int, overlap: int) -> None:
    pages = _pages(6, 12)
    chunks = chunk_pages(pages, count, max_tokens=max_tokens, overlap_tokens=overlap)
    _check(chunks, count, max_tokens)
    # Every sentence appears, in order, exactly once outside the overlaps.
    fresh = [m for c in chunks for m in _marks(c.text[c.overlap_chars :])]
    assert fresh == [(p, k) for p in range(1, 7) for k in range(12)]
    # Chunks are well filled: none but the last is under half the budget.
    assert all(c.token_count > max_tokens // 2 for c in chunks[:-1])
    if overlap == 0:
        assert all(c.overlap_chars == 0 for c in chunks)


def test_overlap_repeats_the_previous_tail(count: CountTokens) -> None:
    chunks = chunk_pages(_pages(3, 20), count, max_tokens=150, overlap_tokens=30)
    assert len(chunks) > 3
    for prev, cur in itertools.pairwise(chunks):
        assert cur.overlap_chars > 0
        repeated = cur.text[: cur.overlap_chars].rstrip()
        assert prev.text.endswith(repeated)
        assert count(repeated) <= 30 + 2  # whole sentences within the overlap budget (+ a join)


def test_headings_start_chunks(count: CountTokens) -> None:
    # Sections of about 60% of the budget: each new section starts a chunk instead of being packed after one.
    section = "## Terms p1s{k}\n\n" + "The buyer pays invoice p1s{k} within thirty days of delivery. " * 4
    body = "\n\n".join(section.format(k=k) for k in range(8))
    one_section = count(section.format(k=0))
    budget = int(one_section / 0.6)
    chunks = chunk_pages([Page(1, body)], count, max_tokens=budget, overlap_tokens=20)
    _check(chunks, count, budget)
    assert len(chunks) == 8
    assert all(c.text.startswith("## Terms") and c.overlap_chars == 0 for c in chunks)


def test_long_paragraphs_split_at_sentences_and_unbroken_text_at_tokens(count: CountTokens) -> None:
    sentences = " ".join(f"Clause p2s{k} binds the supplier to deliver on time." for k in range(60))
    unbroken = "x" * 3000
    cjk = "".join(f"第{k}条规定付款期限为三十天。" for k in range(80))
    by_page = {}
    for n, text in ((1, unbroken), (2, sentences), (3, cjk)):
        by_page[n] = chunk_pages([Page(n, text)], count, max_tokens=80, overlap_tokens=0)
        assert len(by_page[n]) > 2
        assert all(c.token_count == count(c.text) <= 80 and c.pages == (n,) for c in by_page[n])
    assert "".join(c.text for c in by_page[1]) == unbroken
    # Sentence splits never cut a sentence when sentences fit the budget.
    for c in by_page[2]:
        assert c.text.startswith("Clause") and c.text.endswith("on time.")
    assert " ".join(c.text for c in by_page[2]) == sentences
    assert all(c.text.endswith("\u3002") for c in by_page[3]) and "".join(c.text for c in by_page[3]) == cjk


def test_ocr_pages_and_empty_pages(count: CountTokens) -> None:
    doc = Document(
        pages=(Page(1, "Page one p1s0."), Page(2, "", needs_ocr=True), Page(3, ""), Page(4, "Page four p4s0.")),
        content_hash="0" * 64,
        source="scan.pdf",
        format="pdf",
        size_bytes=1,
    )
    with pytest.raises(ValueError, match=r"pages \[2\] need OCR"):
        chunk_document(doc, count, max_tokens=100)
    chunks = chunk_document(doc, count, max_tokens=100, skip_ocr=True)
    assert len(chunks) == 1 and chunks[0].pages == (1, 4)


def test_budget_arithmetic_and_argument_checks(count: CountTokens) -> None:
    assert chunk_budget(max_model_len=4096, prompt_tokens=300, max_output_tokens=500, margin=32) == 3264
    with pytest.raises(ValueError, match="max_model_len=1024"):
        chunk_budget(max_model_len=1024, prompt_tokens=400, max_output_tokens=600)
    with pytest.raises(ValueError, match="overlap_tokens"):
        chunk_pages(_pages(1, 1), count, max_tokens=100, overlap_tokens=51)
    with pytest.raises(ValueError, match="max_tokens"):
        chunk_pages(_pages(1, 1), count, max_tokens=10)


def test_work_stays_linear_on_a_paragraph_without_sentence_ends(count: CountTokens) -> None:
    words = ["buyer", "pays", "invoice", "within", "thirty", "days", "delivery", "supplier", "records", "contract"]
    text = " ".join(words[(k * 7) % len(words)] for k in range(40_000))  # ~280k characters, no full stop
    seen = 0

    def counting(t: str) -> int:
        nonlocal seen
        seen += len(t)
        return count(t)

    chunks = chunk_pages([Page(1, text)], counting, max_tokens=2000, overlap_tokens=100)
    assert all(c.token_count == count(c.text) <= 2000 for c in chunks)
    assert " ".join(c.text[c.overlap_chars :] for c in chunks) == text
    assert seen < 16 * len(text)  # re-tokenizing the rest per part would be ~len(chunks)/2 times more
