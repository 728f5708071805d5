"""Hostile photo-library files and documents, generated in memory (bombs stay small: they are compressed).

Shared by ``benchmarks/hostile_inputs.py`` and the tests in ``tests/preprocessing/test_hostile_inputs.py``;
every sample names the outcome the loaders must give it: ``"ok"`` or an error code.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image

from benchmarks.dng_sample import dng_bytes

__all__ = ["Sample", "document_samples", "image_samples", "pdf_bytes"]


@dataclass(frozen=True)
class Sample:
    name: str
    data: Callable[[], bytes]  # built when asked: some take a moment
    expect: str  # "ok" or the error code
    suffix: str = ""  # a document's file extension


# ------------------------------------------------------------------------------------------------ images


def _save(img: Image.Image, fmt: str, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kwargs)
    return buf.getvalue()


def _photo(size: tuple[int, int] = (320, 240), mode: str = "RGB") -> Image.Image:
    img = Image.linear_gradient("L").resize(size)
    return img.convert(mode) if mode != "L" else img


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` x ``height`` and carries one tiny IDAT: a pixel bomb by its header."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + _png_chunk(b"IEND", b"")
    )


def gif_frame_bomb(frames: int) -> bytes:
    """A 64x64 GIF with ``frames`` 1x1 frames (15 bytes each): 100k frames in 1.5 MB."""
    head = b"GIF89a" + struct.pack("<HHBBB", 64, 64, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    loop = b"!\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    frame = b"!\xf9\x04\x00\x01\x00\x00\x00" + b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00"
    return head + loop + frame * frames + b";"


def _animated(fmt: str, frames: int) -> bytes:
    first = _photo((64, 64))
    rest = [Image.new("RGB", (64, 64), (k % 256, 0, 0)) for k in range(frames - 1)]
    return _save(first, fmt, save_all=True, append_images=rest, duration=10)


def _exif_rotated() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6
    return _save(_photo((400, 200)), "JPEG", exif=exif)


def _palette_transparent() -> bytes:
    img = _photo((200, 100)).convert("P")
    return _save(img, "PNG", transparency=0)


def _heic() -> bytes:
    return b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 200


def _exif_rotated_block() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6
    return exif.tobytes()


def _jxl() -> bytes:
    import imagecodecs
    import numpy as np

    return bytes(imagecodecs.jpegxl_encode(np.asarray(_photo((320, 240), "RGB")), distance=1.0))


def _jxl_bomb() -> bytes:
    """A JPEG XL codestream whose header declares 2^30 x 2^30 pixels (U32 selector 3: 30 bits, plus one)."""
    bits = [0, 1, 1, *([1] * 30), 0, 0, 0, 1, 1, *([1] * 30)]  # not small; height; ratio 0; width
    bits += [1] + [0] * (-(len(bits) + 1) % 8)  # ImageMetadata.all_default
    body = bytes(sum(bits[i + k] << k for k in range(8)) for i in range(0, len(bits), 8))
    return b"\xff\x0a" + body + bytes(64)


def _dng_bomb() -> bytes:
    """A DNG whose raw image declares 32768 x 32768 samples over a few bytes of data."""
    data = bytearray(dng_bytes(_photo((64, 48)), preview_size=None))
    for tag, value in ((256, 32768), (257, 32768)):
        entry = struct.pack("<HHI", tag, 4, 1) + struct.pack("<I", 64 if tag == 256 else 48)
        at = data.find(entry)
        data[at + 8 : at + 12] = struct.pack("<I", value)
    return bytes(data)


def _stray_bytes(jpeg: bytes) -> bytes:
    """Bytes between the last scan and the end marker: libjpeg-turbo warns, every viewer shows it."""
    return jpeg[:-2] + b"\x00" * 7 + jpeg[-2:]


def _svg() -> bytes:
    return b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="100" height="100"><rect/></svg>'


def _eps() -> bytes:
    return b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 100 100\nnewpath 0 0 moveto 100 100 lineto stroke\nshowpage\n"


def image_samples() -> list[Sample]:
    """Every odd file a photo library holds, with the outcome ``decode_for_budget`` must give it."""
    jpeg = _save(_photo((640, 480)), "JPEG")
    return [
        Sample("zero-byte", lambda: b"", "empty_file"),
        Sample("truncated JPEG", lambda: jpeg[: len(jpeg) // 2], "decode_error"),
        Sample("random bytes", lambda: bytes(range(256)) * 16, "decode_error"),
        Sample("pixel bomb PNG 100k x 100k", lambda: _png_header_only(100_000, 100_000), "image_bomb"),
        Sample(
            "pixel bomb GIF 65k x 65k",
            lambda: gif_frame_bomb(1)[:6] + b"\xff\xff\xff\xff" + gif_frame_bomb(1)[10:],
            "image_bomb",
        ),
        Sample("frame bomb GIF 100k frames", lambda: gif_frame_bomb(100_000), "ok"),
        Sample("APNG 300 frames", lambda: _animated("PNG", 300), "ok"),
        Sample("animated WebP 300 frames", lambda: _animated("WEBP", 300), "ok"),
        Sample("CMYK JPEG", lambda: _save(_photo(mode="CMYK"), "JPEG"), "ok"),
        Sample(
            "16-bit grey PNG", lambda: _save(Image.linear_gradient("L").resize((300, 200)).convert("I;16"), "PNG"), "ok"
        ),
        Sample("palette + transparency PNG", _palette_transparent, "ok"),
        Sample("LA PNG", lambda: _save(_photo(mode="LA"), "PNG"), "ok"),
        Sample("P PNG", lambda: _save(_photo().convert("P"), "PNG"), "ok"),
        Sample("1-bit PNG", lambda: _save(_photo().convert("1"), "PNG"), "ok"),
        Sample("EXIF-rotated JPEG", _exif_rotated, "ok"),
        Sample("TIFF", lambda: _save(_photo(), "TIFF"), "ok"),
        Sample("AVIF", lambda: _save(_photo(), "AVIF"), "ok"),
        Sample("SVG", _svg, "unsupported_format"),
        Sample("HEIC header over nothing", _heic, "decode_error"),
        Sample("HEIC", lambda: _save(_photo(), "HEIF", exif=_exif_rotated_block()), "ok"),
        Sample("JPEG XL", _jxl, "ok"),
        Sample("JPEG XL declaring 1G pixels", _jxl_bomb, "image_bomb"),
        Sample("DNG", lambda: dng_bytes(_photo((320, 240))), "ok"),
        Sample("DNG declaring 1G pixels", _dng_bomb, "image_bomb"),
        Sample("JPEG 2000", lambda: _save(_photo(), "JPEG2000"), "ok"),
        Sample("JPEG with bytes before a marker", lambda: _stray_bytes(jpeg), "ok"),
        Sample("EPS (needs Ghostscript)", _eps, "unsupported_format"),
        Sample("PNG zTXt bomb", lambda: _ztxt_bomb(), "decode_error"),
    ]


def _ztxt_bomb() -> bytes:
    png = _save(_photo((16, 16)), "PNG")
    return png[:33] + _png_chunk(b"zTXt", b"k\x00\x00" + zlib.compress(b"a" * 50_000_000, 9)) + png[33:]


# --------------------------------------------------------------------------------------------- documents


def pdf_bytes(objects: list[bytes], *, root: int = 1, trailer_extra: bytes = b"") -> bytes:
    """A PDF of numbered ``objects`` (object k+1 is objects[k]) with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        root,
        trailer_extra,
        xref,
    )
    return bytes(out)


def _stream(content: bytes, *, compress: bool = True) -> bytes:
    data = zlib.compress(content, 9) if compress else content
    filt = b"/Filter /FlateDecode " if compress else b""
    return b"<< /Length %d %s>>\nstream\n" % (len(data), filt) + data + b"\nendstream"


def _pages_pdf(n_pages: int, content: bytes) -> bytes:
    """``n_pages`` pages all drawn by one content stream (object 4) with one set of resources (object 5)."""
    kids = b" ".join(b"%d 0 R" % (6 + k) for k in range(n_pages))
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources 5 0 R /Contents 4 0 R >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % n_pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        _stream(content),
        b"<< /Font << /F1 3 0 R >> >>",
    ]
    return pdf_bytes(objects + [page] * n_pages)


def _heavy_text(lines: int) -> bytes:
    return b"BT /F1 10 Tf 20 760 Td " + b"(heavy shared content stream text) Tj 0 -1 Td " * lines + b"ET"


def _flate_bomb(inflated: int) -> bytes:
    """One page whose content stream inflates to ``inflated`` bytes of spaces, in about 1/1000 of that: one
    compressed megabyte after a full flush is repeated (raw deflate), inside a zlib header and checksum."""
    block = b" " * (1 << 20)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    again = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    count = inflated >> 20
    adler = 1
    for _ in range(count):
        adler = zlib.adler32(block, adler)
    data = b"\x78\xda" + first + again * (count - 1) + comp.flush() + struct.pack(">I", adler)
    stream = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"
    return pdf_bytes(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
            stream,
        ]
    )


def _nested_pdf(depth: int) -> bytes:
    deep = b"[" * depth + b"]" * depth
    return pdf_bytes(
        [
            b"<< /Type /Catalog /Pages 2 0 R /Deep " + deep + b" >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Annots " + deep + b" >>",
            _stream(b"BT /F1 12 Tf 72 700 Td (a page under a deeply nested annotation array) Tj ET"),
        ]
    )


def _encrypted_pdf() -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(612, 792)
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="AES-128")
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def _docx(document_xml: bytes, *, zeros: dict[str, int] | None = None) -> bytes:
    """A minimal valid DOCX around ``document_xml`` (the body), plus members of so many zero bytes (streamed
    into the archive, so a bomb never sits in this process's memory)."""
    ns = b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    files = {
        "[Content_Types].xml": b'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>',  # noqa: E501
        "_rels/.rels": b'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>',  # noqa: E501
        "word/document.xml": b'<?xml version="1.0" encoding="UTF-8"?><w:document '
        + ns
        + b"><w:body>"
        + document_xml
        + b"</w:body></w:document>",
    }
    buf = io.BytesIO()
    block = b"\0" * (1 << 20)
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in files.items():
            zf.writestr(name, body)
        for name, size in (zeros or {}).items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=size >= 1 << 31) as member:
                for start in range(0, size, len(block)):
                    member.write(block[: size - start])
    return buf.getvalue()


def _paragraphs(n: int) -> bytes:
    return b"".join(b"<w:p><w:r><w:t>Paragraph %d of a long contract.</w:t></w:r></w:p>" % k for k in range(n))


def understated_docx(real: int) -> bytes:
    """A DOCX whose word/media/blob.bin inflates to ``real`` bytes while both zip headers declare 1 KiB."""
    data = bytearray(_docx(_paragraphs(3), zeros={"word/media/blob.bin": real}))
    name = b"word/media/blob.bin"
    for sig, size_at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        pos = 0
        while (pos := data.find(sig, pos)) >= 0:
            name_len = struct.unpack_from("<H", data, pos + (26 if sig == b"PK\x03\x04" else 28))[0]
            start = pos + (30 if sig == b"PK\x03\x04" else 46)
            if bytes(data[start : start + name_len]) == name:
                struct.pack_into("<I", data, pos + size_at, 1024)
            pos += 4
    return bytes(data)


def _encrypted_docx() -> bytes:
    # An OLE compound file header, then the stream names an encrypted Office file carries.
    return (
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
        + b"\0" * 504
        + "EncryptionInfo\0EncryptedPackage\0".encode("utf-16-le")
        + b"\0" * 1024
    )


def document_samples(*, big: bool = False) -> list[Sample]:
    """Hostile documents, with the outcome ``load_document`` in the sandbox must give each. ``big`` uses the
    sizes of a field report (49 MB of one-line text, 1e6 nested tags); the default keeps tests quick."""
    one_line = 49_000_000 if big else 4_000_000
    nested = 1_000_000 if big else 100_000
    bomb = 2 << 30 if big else 1 << 30
    return [
        Sample("PDF 500 pages, one heavy shared stream", lambda: _pages_pdf(500, _heavy_text(20_000)), "ok", ".pdf"),
        Sample("PDF 5000 pages", lambda: _pages_pdf(5000, _heavy_text(1)), "too_many_pages", ".pdf"),
        Sample(f"PDF flate bomb ({bomb >> 30} GB stream)", lambda: _flate_bomb(bomb), "parse_memory", ".pdf"),
        Sample("PDF encrypted", _encrypted_pdf, "pdf_encrypted", ".pdf"),
        Sample("PDF malformed", lambda: b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 9 0 R", "pdf_malformed", ".pdf"),
        Sample("PDF nested arrays 100k deep", lambda: _nested_pdf(100_000), "pdf_malformed", ".pdf"),
        Sample(
            "DOCX sizes understated (256 MB real)", lambda: understated_docx(256 * 1024**2), "docx_malformed", ".docx"
        ),
        Sample(
            "DOCX zip bomb (300 MB declared)",
            lambda: _docx(_paragraphs(3), zeros={"word/media/zero.bin": 300 * 1024**2}),
            "docx_too_large",
            ".docx",
        ),
        Sample("DOCX encrypted", _encrypted_docx, "docx_encrypted", ".docx"),
        Sample(
            "DOCX nested tables 5000 deep",
            lambda: _docx(b"<w:tbl><w:tr><w:tc>" * 5000 + b"</w:tc></w:tr></w:tbl>" * 5000),
            "docx_malformed",
            ".docx",
        ),
        Sample('HTML "<a " x 120k', lambda: b"<a " * 120_000, "ok", ".html"),
        Sample(f"HTML {nested:,} nested tags", lambda: b"<div>" * nested + b"deep" + b"</div>" * nested, "ok", ".html"),
        Sample(f"text {one_line // 10**6} MB on one line", lambda: b"word " * (one_line // 5), "ok", ".txt"),
        Sample("text with NUL bytes", lambda: b"abc\0def" * 100, "binary_text", ".txt"),
    ]
