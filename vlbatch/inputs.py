"""Server-side directory listing for jobs, confined to the configured input roots."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from vlbatch.errors import INPUT_PATH_REFUSED, VlbatchError

# Still photos as albums hold them: the formats Pillow reads, HEIC/HEIF, JPEG XL, and camera RAW files.
IMAGE_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".jpe", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".avif", ".heic", ".heif", ".hif"}
    | {".jxl", ".jp2", ".j2k", ".jpf", ".jpx", ".psd", ".mpo"}
    | {".dng", ".cr2", ".cr3", ".crw", ".nef", ".nrw", ".arw", ".srf", ".sr2", ".raf", ".orf", ".rw2", ".pef"}
    | {".srw", ".x3f", ".3fr", ".erf", ".kdc", ".dcr", ".mrw", ".mos", ".iiq", ".rwl", ".raw"}
)
VIDEO_SUFFIXES = frozenset({".mp4", ".m4v", ".mov", ".mkv", ".webm"})


# An item's inputs carry this key (true) when a file name of it is not UTF-8: the name is stored shown with
# ``\\x`` escapes, which no database refuses, and the worker fails the item alone with ``file_name_not_utf8``.
NAME_NOT_UTF8 = "name_not_utf8"


def storable(paths: Sequence[str]) -> tuple[list[str], bool]:
    """``paths`` as text a database stores, and whether any had to change. A folder listing gives a name that is
    not UTF-8 (old cameras, zip archives) with its bytes as lone surrogates, which neither SQLite's nor
    PostgreSQL's driver encodes: such a name is shown with ``\\x`` escapes instead (``caf\\xe9.jpg``)."""
    out, changed = [], False
    for path in paths:
        try:
            path.encode("utf-8")
            out.append(path)
        except UnicodeEncodeError:
            out.append(path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))
            changed = True
    return out, changed


class InputRootError(VlbatchError):
    """The requested folder is missing or outside every allowed root."""

    code = INPUT_PATH_REFUSED


def lexically_inside(raw: str | Path, roots: Sequence[Path]) -> bool:
    """Whether ``raw``, made absolute and with ``..`` folded but nothing on disk looked at, lies inside a root (as
    given or resolved). Checked before a client's path is resolved or stat-ed: a path outside every root is
    refused the same way whether it exists or not, so the answer tells nothing about the disk outside them."""
    try:
        text = os.path.normpath(os.path.abspath(os.path.expanduser(os.fspath(raw))))
    except (TypeError, ValueError):
        return False
    bounds = {os.path.normpath(os.path.abspath(os.path.expanduser(r))) for r in roots}
    bounds |= {os.path.realpath(r) for r in roots}
    return any(text == b or text.startswith(b.rstrip(os.sep) + os.sep) for b in bounds)


def _refused(path: str, roots: Sequence[Path]) -> InputRootError:
    """Outside the roots: the answer names no root (a client must not learn the server's folders or another
    tenant's), only whether any are configured."""
    if not roots:
        return InputRootError(
            f"'{path}' cannot be read: no input roots are configured for this tenant "
            "(VLBATCH_ALLOWED_INPUT_ROOTS, or `vlbatch keys roots`)"
        )
    return InputRootError(f"'{path}' is outside the allowed input roots of this tenant")


def _confined(path: str, roots: Sequence[Path]) -> Path:
    if not lexically_inside(path, roots):
        raise _refused(path, roots)
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        raise _refused(path, roots) from None
    if not any(resolved.is_relative_to(r.resolve()) for r in roots):
        raise _refused(path, roots)
    return resolved


def confine(path: str, roots: Sequence[Path]) -> Path:
    """A folder inside an allowed root (symlinks resolved), or InputRootError saying why not."""
    resolved = _confined(path, roots)
    if not resolved.is_dir():
        raise InputRootError(f"'{path}' is not a directory")
    return resolved


def confine_file(path: str, roots: Sequence[Path]) -> Path:
    """A file inside an allowed root (symlinks resolved first), or InputRootError saying why not."""
    resolved = _confined(path, roots)
    if not resolved.is_file():
        raise InputRootError(f"'{path}' is not a file")
    return resolved


def confine_path(path: str, roots: Sequence[Path]) -> Path:
    """A path inside an allowed root (symlinks resolved), whether a file is there or not: an inline item's image,
    read later by the worker. Nothing outside the roots is looked at, and inside them a missing file is not
    refused, so the answer tells nothing of what exists."""
    return _confined(path, roots)


def confine_dir(path: str, roots: Sequence[Path]) -> Path:
    """A folder to write into, inside an allowed root. Not created here: the request may still be refused, and the
    worker that writes the first file creates it."""
    resolved = _confined(path, roots)
    if resolved.exists() and not resolved.is_dir():
        raise InputRootError(f"'{path}' is not a directory")
    return resolved


def iter_images(folder: Path, *, recursive: bool, roots: Sequence[Path], videos: bool = False) -> Iterator[Path]:
    """Image files (and video files when ``videos``) below ``folder`` in name order; symlinks that lead out
    of the roots are skipped."""
    suffixes = IMAGE_SUFFIXES | VIDEO_SUFFIXES if videos else IMAGE_SUFFIXES
    return iter_files(folder, suffixes=suffixes, recursive=recursive, roots=roots)


def iter_files(folder: Path, *, suffixes: Collection[str], recursive: bool, roots: Sequence[Path]) -> Iterator[Path]:
    """Files with one of ``suffixes`` below ``folder`` in name order (component by component, as paths sort);
    symlinked files are resolved, and skipped when they lead out of the roots; symlinked folders are not entered,
    FIFOs and devices are not files.

    One ``scandir`` per folder, the file type from the directory entry: a million-file folder was spent mostly
    resolving every path component of every file and stat-ing each; only a symlink is resolved here. The folder
    itself is already confined (``confine``), so what lies in it through real folders lies inside the roots.
    """
    real_roots = [r.resolve() for r in roots]
    found: list[str] = []  # as listed (a million of them: plain strings, nothing per file beside them)
    linked: dict[str, str] = {}  # a symlink as listed -> the file it leads to
    pending = [str(folder)]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)
        except OSError:  # unreadable or vanished meanwhile: listed as empty, as a glob would
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if recursive:
                        pending.append(entry.path)
                    continue
                if os.path.splitext(entry.name)[1].lower() not in suffixes or not entry.is_file():
                    continue
                if entry.is_symlink():
                    real = os.path.realpath(entry.path)
                    if not any(Path(real).is_relative_to(r) for r in real_roots):
                        continue
                    linked[entry.path] = real
            except OSError:
                continue
            found.append(entry.path)
    # Path order compares component by component: with the separator below every character a name can hold,
    # plain string order is that order.
    found.sort(key=lambda path: path.replace(os.sep, "\0"))
    for path in found:
        yield Path(linked.get(path, path))
