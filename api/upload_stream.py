"""A multipart upload read as it streams in: its one file written straight to the file store under a cap.

Parsing with ``UploadFile`` spools the whole body to a temporary file before the route runs, so a cap checked
in the route comes after the disk has taken it all. Here the body is fed to ``python-multipart``'s streaming
parser a network chunk at a time; the file part's bytes go to a ``FileStore`` writer as they come, counted,
and the upload is refused the moment they pass the cap, with the partial file removed. The small form fields
(``purpose``) are kept in memory under a cap of their own; the file name is checked before a byte is written.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from anyio import to_thread
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from api.http_errors import RequestRefused
from vlbatch.db.filestore import FileStore, Writer
from vlbatch.errors import INVALID_FILE_NAME, INVALID_REQUEST, VlbatchError

MAX_FIELD_BYTES = 1024  # a form field beside the file (``purpose``)
MAX_FIELDS = 8
MAX_NAME_CHARS = 255  # a file name as file systems allow it
FLUSH_BYTES = 1 << 20  # file bytes gathered before a write to disk
_BAD_NAME = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff/\\]")


@dataclass
class Upload:
    """What a multipart upload held: its form fields, and its one file as stored (``stored_as``, ``size``)."""

    fields: dict[str, str] = field(default_factory=dict)
    filename: str | None = None
    stored_as: str | None = None
    size: int = 0


def checked_name(raw: bytes) -> str:
    """The file name as the client sent it, if it is text a row, a listing and a download header can carry."""
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestRefused(INVALID_FILE_NAME, "the file name is not UTF-8 text") from None
    if not name or len(name) > MAX_NAME_CHARS or _BAD_NAME.search(name):
        raise RequestRefused(
            INVALID_FILE_NAME,
            f"the file name must be 1 to {MAX_NAME_CHARS} characters without control characters, NUL or slashes",
        )
    return name


class _Parts:
    """The parser's callbacks: where the current part's header, field text or file bytes go."""

    def __init__(self, fs: FileStore, max_bytes: int, too_large: Callable[[int], VlbatchError]) -> None:
        self.fs, self.max_bytes, self.too_large = fs, max_bytes, too_large
        self.upload = Upload()
        self.writer: Writer | None = None
        self.pending: list[bytes] = []  # file bytes not yet written
        self.pending_size = 0
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._disposition = b""
        self._field: str | None = None
        self._field_text = bytearray()
        self._in_file = False

    def on_part_begin(self) -> None:
        self._disposition, self._field, self._in_file = b"", None, False
        self._field_text.clear()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        if bytes(self._header_name).lower() == b"content-disposition":
            self._disposition = bytes(self._header_value)
        self._header_name.clear()
        self._header_value.clear()

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        if b"name" not in options:
            raise RequestRefused(INVALID_REQUEST, "a multipart part has no name in its Content-Disposition")
        name = options[b"name"].decode("latin-1")
        if b"filename" in options:
            if name != "file" or self.writer is not None:
                raise RequestRefused(INVALID_REQUEST, "the upload takes one file, in the form field 'file'")
            self.upload.filename = checked_name(options[b"filename"])
            self.writer = self.fs.writer()
            self._in_file = True
        else:
            if len(self.upload.fields) >= MAX_FIELDS:
                raise RequestRefused(INVALID_REQUEST, f"the upload has more than {MAX_FIELDS} form fields")
            self._field = name

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._in_file:
            self.upload.size += end - start
            if self.upload.size > self.max_bytes:
                raise self.too_large(self.upload.size)
            self.pending.append(data[start:end])
            self.pending_size += end - start
            return
        self._field_text += data[start:end]
        if len(self._field_text) > MAX_FIELD_BYTES:
            raise RequestRefused(INVALID_REQUEST, f"form field '{self._field}' is longer than {MAX_FIELD_BYTES} bytes")

    def on_part_end(self) -> None:
        if self._field is not None:
            try:
                self.upload.fields[self._field] = self._field_text.decode("utf-8")
            except UnicodeDecodeError:
                raise RequestRefused(INVALID_REQUEST, f"form field '{self._field}' is not UTF-8 text") from None

    def take_pending(self) -> bytes:
        piece = b"".join(self.pending)
        self.pending.clear()
        self.pending_size = 0
        return piece


async def receive_upload(
    request: Request, fs: FileStore, *, max_bytes: int, too_large: Callable[[int], VlbatchError]
) -> Upload:
    """Read ``request``'s multipart body, storing its file in ``fs``; ``too_large(size)`` is raised once the
    file passes ``max_bytes``. On any refusal nothing of the file is left on disk."""
    content_type, params = parse_options_header(request.headers.get("content-type"))
    if content_type != b"multipart/form-data" or b"boundary" not in params:
        raise RequestRefused(INVALID_REQUEST, "the upload must be multipart/form-data with a boundary")
    parts = _Parts(fs, max_bytes, too_large)
    callbacks = {name: getattr(parts, name) for name in dir(_Parts) if name.startswith("on_")}
    parser = MultipartParser(params[b"boundary"], callbacks)  # type: ignore[arg-type]
    try:
        async for chunk in request.stream():
            parser.write(chunk)
            if parts.writer is not None and parts.pending_size >= FLUSH_BYTES:
                await to_thread.run_sync(parts.writer.add, parts.take_pending())
        parser.finalize()
        if parts.writer is None:
            raise RequestRefused(INVALID_REQUEST, "the upload has no file (form field 'file')")
        await to_thread.run_sync(parts.writer.add, parts.take_pending())
        parts.upload.stored_as, _ = await to_thread.run_sync(parts.writer.keep)
    except BaseException as exc:
        if parts.writer is not None:
            parts.writer.discard()
        if isinstance(exc, ValueError) and not isinstance(exc, VlbatchError):  # the parser's own complaint
            raise RequestRefused(INVALID_REQUEST, f"the multipart body does not parse ({exc})") from None
        raise
    return parts.upload
