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
    return map(Path, iter_image_paths(folder, recursive=recursive, roots=roots, videos=videos))


def iter_image_paths(folder: Path, *, recursive: bool, roots: Sequence[Path], videos: bool = False) -> Iterator[str]:
    """``iter_images`` as text, for a job's items: a ``Path`` made for each of a million files, only to be turned
    back into text, cost a third of the walk."""
    suffixes = IMAGE_SUFFIXES | VIDEO_SUFFIXES if videos else IMAGE_SUFFIXES
    return iter_file_paths(folder, suffixes=suffixes, recursive=recursive, roots=roots)


def iter_files(folder: Path, *, suffixes: Collection[str], recursive: bool, roots: Sequence[Path]) -> Iterator[Path]:
    """``iter_file_paths`` as ``Path`` objects."""
    return map(Path, iter_file_paths(folder, suffixes=suffixes, recursive=recursive, roots=roots))


def iter_file_paths(
    folder: Path, *, suffixes: Collection[str], recursive: bool, roots: Sequence[Path]
) -> Iterator[str]:
    """Files with one of ``suffixes`` below ``folder`` in name order (component by component, as paths sort), yielded
    as the walk finds them; symlinked files are resolved, and skipped when they lead out of the roots; symlinked
    folders are not entered, FIFOs and devices are not files.

    One ``scandir`` per folder, the file type from the directory entry: a million-file folder was spent mostly
    resolving every path component of every file and stat-ing each; only a symlink is resolved here. The folder
    itself is already confined (``vlbatch.paths.confined``), so what lies in it through real folders lies inside the
    roots.

    Streamed: the walk keeps the names of the folders it is in (each sorted, to be yielded in order) and nothing of
    the folders it has left, so a job over millions of files in many folders holds one folder's names at a time
    (a single folder of a million files: its million names, the least a name order can hold).
    """
    # Depth first through each folder's names in string order: two paths that differ first in one folder's entry
    # compare as those names do, so this is the order of whole paths compared component by component.
    stack: list[Iterator[tuple[str, int]]] = [_listing(str(folder), suffixes, recursive)]
    prefixes: list[str] = [str(folder)]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            prefixes.pop()
            continue
        name, kind = entry
        path = os.path.join(prefixes[-1], name)
        if kind == _DIR:
            stack.append(_listing(path, suffixes, recursive))
            prefixes.append(path)
        elif kind == _LINK:
            real = os.path.realpath(path)
            if inside(real, roots):
                yield real
        else:
            yield path


_FILE, _LINK, _DIR = 0, 1, 2


def _listing(directory: str, suffixes: Collection[str], recursive: bool) -> Iterator[tuple[str, int]]:
    """One folder's entries worth walking, (name, kind) in name order: files with a suffix asked for (``_LINK``
    when a symlink leads to one) and, when ``recursive``, real folders. Names only: nothing per entry beyond them."""
    names: list[tuple[str, int]] = []
    try:
        with os.scandir(directory) as listing:
            for entry in listing:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if recursive:
                            names.append((entry.name, _DIR))
                        continue
                    if os.path.splitext(entry.name)[1].lower() not in suffixes or not entry.is_file():
                        continue
                    names.append((entry.name, _LINK if entry.is_symlink() else _FILE))
                except OSError:
                    continue
    except OSError:  # unreadable or vanished meanwhile: listed as empty, as a glob would
        return iter(())
    names.sort()
    return iter(names)
