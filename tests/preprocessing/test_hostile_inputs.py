"""Hostile photo-library files and documents: each ends in a result or its error code, within a time bound,
without growing this process's memory; document parsing runs in the sandbox's child, whose deadline, memory
cap and crashes become coded errors while the caller lives on. The samples are generated in memory
(``benchmarks/hostile_samples.py``); bombs are compressed, so nothing large is written."""

from __future__ import annotations

import ctypes
import io
import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from benchmarks.hostile_samples import Sample, document_samples, gif_frame_bomb, image_samples
from preprocessing.chunking import CountTokens, chunk_pages, load_token_counter
from preprocessing.documents import DocumentLimits, Page, load_document
from preprocessing.documents.child import peak_rss_bytes, reset_peak_rss
from preprocessing.documents.sandbox import ParseBounds, Sandbox
from preprocessing.images import decode_for_budget, load_source
from preprocessing.input_errors import InputError

BUDGET = {"factor": 28, "min_pixels": 56 * 56, "max_pixels": 256 * 28 * 28}
MiB = 1024**2


class _Bounded:
    """Peak resident memory of this process while the block runs, above what it held before."""

    def __enter__(self) -> _Bounded:
        reset_peak_rss()
        self.before = peak_rss_bytes()
        self.started = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.monotonic() - self.started
        self.grew = peak_rss_bytes() - self.before


def _outcome(fn: object, *args: object, **kwargs: object) -> str:
    try:
        fn(*args, **kwargs)  # type: ignore[operator]
    except InputError as exc:
        return exc.code
    return "ok"


@pytest.mark.parametrize("sample", image_samples(), ids=lambda s: s.name)
def test_every_odd_photo_file_gets_a_result_or_its_code(sample: Sample) -> None:
    data = sample.data()
    with _Bounded() as bound:
        outcome = _outcome(decode_for_budget, data, **BUDGET)
    assert outcome == sample.expect
    assert bound.seconds < 10
    assert bound.grew < 200 * MiB


def test_animated_images_decode_their_first_frame_only() -> None:
    data = gif_frame_bomb(100_000)
    with Image.open(io.BytesIO(data)) as img:
        first = img.convert("RGB").resize((56, 56))
    with _Bounded() as bound:
        out = decode_for_budget(data, **BUDGET)
    assert bound.seconds < 2  # 100k frames are never walked
    assert out.size == (56, 56) and list(out.getdata()) == list(first.getdata())


def test_a_png_named_jpg_and_an_svg_named_png(tmp_path: Path) -> None:
    png = io.BytesIO()
    Image.new("RGB", (120, 80), (200, 10, 10)).save(png, "PNG")
    (tmp_path / "photo.jpg").write_bytes(png.getvalue())
    (tmp_path / "logo.png").write_bytes(b'<svg xmlns="http://www.w3.org/2000/svg"/>')
    load = {"allowed_roots": [tmp_path], "max_bytes": MiB, "url_timeout_s": 1}
    out = decode_for_budget(load_source(str(tmp_path / "photo.jpg"), **load), **BUDGET)
    assert out.getpixel((10, 10)) == (200, 10, 10)
    with pytest.raises(InputError) as err:
        decode_for_budget(load_source(str(tmp_path / "logo.png"), **load), **BUDGET)
    assert err.value.code == "unsupported_format" and "SVG" in err.value.message


# ------------------------------------------------------------------------------------------- documents

TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox(ParseBounds(memory_bytes=2048 * MiB, timeout_s=TIMEOUT_S))
    yield box
    box.close()


@pytest.mark.parametrize("sample", document_samples(), ids=lambda s: s.name)
def test_every_hostile_document_gets_its_code_within_the_bounds(
    sample: Sample, sandbox: Sandbox, tmp_path: Path
) -> None:
    path = tmp_path / f"doc{sample.suffix}"
    path.write_bytes(sample.data())
    assert path.stat().st_size < 8 * MiB  # bombs stay compressed on disk
    with _Bounded() as bound:
        outcome = _outcome(sandbox.call, load_document, path, what=path.name)
    assert outcome == sample.expect
    assert bound.seconds < TIMEOUT_S + 5
    assert bound.grew < 200 * MiB  # the parse happened in the child, not here


def test_deadline_kills_the_parser_and_the_next_document_is_read(tmp_path: Path) -> None:
    nested = tmp_path / "nested.html"
    nested.write_bytes(b"<div>" * 2_000_000 + b"</div>" * 2_000_000)  # ~10 s of html.parser
    ok = tmp_path / "ok.txt"
    ok.write_text("a short note")
    box = Sandbox(ParseBounds(timeout_s=1.0))
    try:
        started = time.monotonic()
        with pytest.raises(InputError) as err:
            box.call(load_document, nested, what="nested.html")
        assert err.value.code == "parse_timeout" and "nested.html" in err.value.message
        assert time.monotonic() - started < 1.0 + 5  # one second, plus starting the child
        assert box.call(load_document, ok).pages[0].text == "a short note"
    finally:
        box.close()


def test_memory_cap_and_crashes_are_coded_and_the_caller_lives_on() -> None:
    bomb = zlib.compress(b"\0" * (1 << 30), 9)  # 1 MB that inflates to 1 GiB
    box = Sandbox(ParseBounds(memory_bytes=256 * MiB, timeout_s=30))
    try:
        with pytest.raises(InputError) as err:
            box.call(zlib.decompress, bomb)
        assert err.value.code == "parse_memory" and "256 MiB" in err.value.message
        with pytest.raises(InputError) as err:
            box.call(ctypes.string_at, 0)  # a read of address 0: SIGSEGV in the child
        assert err.value.code == "parse_crashed" and "SIGSEGV" in err.value.message
        with pytest.raises(InputError) as err:
            box.call(os.abort)  # what pdfium does when an allocation fails
        assert err.value.code == "parse_crashed" and "SIGABRT" in err.value.message
        with pytest.raises(ValueError):  # an ordinary exception comes back as itself
            box.call(int, "x")
        assert box.call(len, "still serving") == 13
    finally:
        box.close()


def test_children_are_reused_and_replaced_after_their_task_count() -> None:
    box = Sandbox(ParseBounds(timeout_s=30, tasks_per_child=2))
    try:
        pids = [box.call(os.getpid) for _ in range(4)]
    finally:
        box.close()
    assert pids[0] == pids[1] != pids[2] == pids[3] != os.getpid()


def test_docx_xml_cap_and_understated_sizes_read_in_bounded_blocks(tmp_path: Path) -> None:
    from benchmarks.hostile_samples import understated_docx

    path = tmp_path / "liar.docx"
    path.write_bytes(understated_docx(512 * MiB))
    with _Bounded() as bound:
        assert _outcome(load_document, path) == "docx_malformed"  # its real size fails the CRC at 1 KiB
    assert bound.grew < 64 * MiB and bound.seconds < 5
    body = "".join(f"<w:p><w:r><w:t>Paragraph {k}</w:t></w:r></w:p>" for k in range(20_000))
    from benchmarks.hostile_samples import _docx

    path.write_bytes(_docx(body.encode()))
    assert _outcome(load_document, path, limits=DocumentLimits(max_xml_bytes=256 * 1024)) == "docx_too_large"
    assert load_document(path).page_count == 1


# -------------------------------------------------------------------------------------------- chunking


@pytest.fixture(scope="module")
def count(tiny_model: Path) -> CountTokens:
    return load_token_counter(tiny_model)


@pytest.mark.parametrize("line", ["word " * 200_000, "x" * 1_000_000], ids=["words", "no-spaces"])
def test_a_megabyte_line_is_cut_before_tokenizing(count: CountTokens, line: str) -> None:
    longest = 0
    seen = 0

    def counting(text: str) -> int:
        nonlocal longest, seen
        longest, seen = max(longest, len(text)), seen + len(text)
        return count(text)

    with _Bounded() as bound:
        chunks = chunk_pages([Page(1, line.strip())], counting, max_tokens=2000, overlap_tokens=100)
    assert all(c.token_count <= 2000 for c in chunks)
    assert "".join(c.text[c.overlap_chars :] for c in chunks).replace(" ", "") == line.replace(" ", "")
    assert longest <= 2000 * 8 * 4 + 2  # never the whole line at once
    assert seen < 16 * len(line)  # linear work
    assert bound.grew < 200 * MiB


def test_a_child_outlives_the_thread_that_first_needed_it() -> None:
    """A child's death signal follows the thread that started it: a child started from a caller's thread (a pool
    shut down, a request done) was killed with it, and the next document failed as crashed."""
    import threading

    box = Sandbox(ParseBounds(timeout_s=30))
    try:
        first: list[int] = []
        caller = threading.Thread(target=lambda: first.append(box.call(os.getpid)))
        caller.start()
        caller.join(60)
        time.sleep(0.5)  # a death signal tied to that thread has landed by now
        assert box.call(os.getpid) == first[0]  # the same child, alive, answers
    finally:
        box.close()
