"""Server-side directory listing for jobs, confined to the configured input roots (``vlbatch.paths``)."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from vlbatch.paths import inside

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
    itself is already confined (``vlbatch.paths.confined``), so what lies in it through real folders lies inside the
    roots.
    """
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
                    if not inside(real, roots):
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
