"""PDF: per-page text with pypdf, scan detection, and page rendering with pypdfium2 for the vision model."""

from __future__ import annotations

import io
import logging
import math
import re
from pathlib import Path
from typing import Any

from PIL import Image

from preprocessing.documents.model import DocumentLimits, Page
from preprocessing.documents.textfiles import normalise_text
from preprocessing.input_errors import InputError

__all__ = ["extract_pdf", "render_page"]

log = logging.getLogger(__name__)

# pdfium renders at 72 dpi for scale 1; beyond ~300 dpi a page image only costs visual tokens.
_MAX_SCALE = 300 / 72


def extract_pdf(data: bytes, *, what: str, limits: DocumentLimits) -> list[Page]:
    """Text of each page; a page whose text layer is (nearly) empty but that holds an image needs OCR."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError

    if b"%PDF-" not in data[:1024]:  # readers accept junk before the header, as pypdf does
        raise InputError("pdf_malformed", f"{what}: no %PDF- header, so it is not a PDF")
    try:
        # Untrusted bytes: pypdf raises many exception types on broken files; any of them means "malformed".
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not _decrypt_empty_password(reader):
            raise InputError("pdf_encrypted", f"{what}: encrypted with a password; save an unprotected copy")
        n_pages = len(reader.pages)
    except InputError:
        raise
    except (DependencyError, FileNotDecryptedError) as exc:
        raise InputError("pdf_encrypted", f"{what}: cannot decrypt ({exc}); save an unprotected copy") from exc
    except Exception as exc:
        raise InputError("pdf_malformed", f"{what}: unreadable PDF ({type(exc).__name__}: {exc})") from exc
    if n_pages == 0:
        raise InputError("empty_document", f"{what}: the PDF has no pages")
    if n_pages > limits.max_pages:
        raise InputError("too_many_pages", f"{what}: {n_pages} pages, limit {limits.max_pages}; split the file")
    pages = []
    # Pages drawn by the same content stream with the same resources have the same text: one heavy stream
    # shared by 500 pages is read once, not 500 times.
    seen: dict[tuple[Any, ...], tuple[str, bool]] = {}
    for index in range(n_pages):
        try:
            page = reader.pages[index]
            key = _content_key(page)
            if key is not None and key in seen:
                text, scanned = seen[key]
            else:
                text = normalise_text(page.extract_text() or "")
                short = len("".join(text.split())) < limits.min_text_chars
                scanned = short and (_has_image(page) or _has_inline_image(page))
                if key is not None:
                    seen[key] = (text, scanned)
        except LimitReachedError as exc:  # a stream inflating past pypdf's cap: pdfium would inflate it too
            raise InputError(
                "parse_memory", f"{what}: page {index + 1} holds a stream that inflates past pypdf's limit ({exc})"
            ) from exc
        except Exception as exc:
            # One page pypdf cannot parse should not fail a 500-page file: pdfium, which renders it for
            # transcription, is more forgiving (and render_page reports pdf_malformed if it is not).
            log.warning("%s: page %d text unreadable, sent to OCR: %s: %s", what, index + 1, type(exc).__name__, exc)
            text, scanned = "", True
        # A scan's stray text layer (page numbers, OCR garbage) is dropped: the transcription replaces it.
        pages.append(Page(number=index + 1, text="" if scanned else text, needs_ocr=scanned))
    return pages


def _content_key(page: Any) -> tuple[Any, ...] | None:
    """The page's content streams and resources as object numbers, or None when either is not a plain
    reference (then the page is read on its own)."""
    from pypdf.generic import ArrayObject, IndirectObject

    contents = page.raw_get("/Contents") if "/Contents" in page else None
    refs = list(contents) if isinstance(contents, ArrayObject) else [contents]
    if not refs or not all(isinstance(r, IndirectObject) for r in refs):
        return None
    resources = page.raw_get("/Resources") if "/Resources" in page else None
    if resources is not None and not isinstance(resources, IndirectObject):
        return None
    res_key = (resources.idnum, resources.generation) if resources is not None else None
    return (tuple((r.idnum, r.generation) for r in refs if r is not None), res_key)


def _decrypt_empty_password(reader: Any) -> bool:
    """Many PDFs are 'encrypted' only to restrict printing, with an empty user password: those open."""
    from pypdf import PasswordType

    return bool(reader.decrypt("") != PasswordType.NOT_DECRYPTED)


def _has_image(page: Any, depth: int = 0) -> bool:
    """Whether the page draws an image XObject, looking one level into form XObjects (scanners nest them)."""
    resources = page.get("/Resources") if depth == 0 else page.get_object().get("/Resources")
    if resources is None:
        return False
    xobjects = resources.get_object().get("/XObject")
    if xobjects is None:
        return False
    for ref in xobjects.get_object().values():
        obj = ref.get_object()
        subtype = obj.get("/Subtype")
        if subtype == "/Image":
            return True
        if subtype == "/Form" and depth < 2 and _has_image(obj, depth + 1):
            return True
    return False


_INLINE_IMAGE = re.compile(rb"(?:^|\s)BI\s.*?\sID\s", re.DOTALL)


def _has_inline_image(page: Any) -> bool:
    """Whether the content stream draws an inline image (BI ... ID ... EI), as some scanners write.
    Only asked for pages without text, so decoding their content stream costs little.
    """
    contents = page.get_contents()
    return contents is not None and _INLINE_IMAGE.search(contents.get_data()) is not None


def render_page(source: Path | bytes, page_number: int, *, max_pixels: int) -> Image.Image:
    """Render one 1-based page to an RGB image of at most ``max_pixels`` pixels (aspect ratio kept).

    Pass ``preprocessing.images.budget_pixels(...)`` as ``max_pixels`` to bound the page's visual tokens;
    ``prepare_image`` then snaps the size to the model's patch grid. pdfium is not thread-safe: call this
    from one thread per process (the worker's preprocessing thread).
    """
    import pypdfium2 as pdfium

    if max_pixels < 28 * 28:
        raise ValueError(f"max_pixels={max_pixels} is below one 28x28 patch; raise the visual-token budget")
    what = str(source) if isinstance(source, Path) else "<pdf bytes>"
    try:
        pdf = pdfium.PdfDocument(source)
    except pdfium.PdfiumError as exc:
        code = "pdf_encrypted" if "password" in str(exc).lower() else "pdf_malformed"
        raise InputError(code, f"{what}: pdfium cannot open it ({exc})") from exc
    try:
        if not 1 <= page_number <= len(pdf):
            raise InputError("page_out_of_range", f"{what}: page {page_number} not in 1..{len(pdf)}")
        page = pdf[page_number - 1]
        try:
            width_pt, height_pt = page.get_size()
            scale = min(_MAX_SCALE, math.sqrt(max_pixels / max(width_pt * height_pt, 1.0)))
            image = page.render(scale=scale).to_pil().convert("RGB")
        finally:
            page.close()
    finally:
        pdf.close()
    if image.width * image.height > max_pixels:  # pdfium rounds sizes up; shave the excess
        shrink = math.sqrt(max_pixels / (image.width * image.height))
        size = (max(1, math.floor(image.width * shrink)), max(1, math.floor(image.height * shrink)))
        image = image.resize(size, Image.Resampling.LANCZOS)
    log.debug("rendered %s page %d at %dx%d", what, page_number, image.width, image.height)
    return image
