"""Server-side directory listing for jobs, confined to the configured input roots."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
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


class InputRootError(VlbatchError):
    """The requested folder is missing or outside every allowed root."""

    code = INPUT_PATH_REFUSED


def confine(path: str, roots: list[Path]) -> Path:
    resolved = Path(path).resolve()
    for root in roots:
        if resolved.is_relative_to(root.resolve()):
            if not resolved.is_dir():
                raise InputRootError(f"'{path}' is not a directory")
            return resolved
    allowed = ", ".join(str(r) for r in roots) or "none configured (set VLBATCH_ALLOWED_INPUT_ROOTS)"
    raise InputRootError(f"'{path}' is outside the allowed input roots ({allowed})")


def confine_file(path: str, roots: list[Path]) -> Path:
    """A file inside an allowed root (symlinks resolved first), or InputRootError saying why not."""
    resolved = Path(path).resolve()
    if not any(resolved.is_relative_to(r.resolve()) for r in roots):
        allowed = ", ".join(str(r) for r in roots) or "none configured (set VLBATCH_ALLOWED_INPUT_ROOTS)"
        raise InputRootError(f"'{path}' is outside the allowed input roots ({allowed})")
    if not resolved.is_file():
        raise InputRootError(f"'{path}' is not a file")
    return resolved


def confine_dir(path: str, roots: list[Path]) -> Path:
    """A folder to write into, inside an allowed root. Not created here: the request may still be refused, and the
    worker that writes the first file creates it."""
    resolved = Path(path).resolve()
    if not any(resolved.is_relative_to(r.resolve()) for r in roots):
        allowed = ", ".join(str(r) for r in roots) or "none configured (set VLBATCH_ALLOWED_INPUT_ROOTS)"
        raise InputRootError(f"'{path}' is outside the allowed input roots ({allowed})")
    if resolved.exists() and not resolved.is_dir():
        raise InputRootError(f"'{path}' is not a directory")
    return resolved


def iter_images(folder: Path, *, recursive: bool, roots: list[Path], videos: bool = False) -> Iterator[Path]:
    """Image files (and video files when ``videos``) below ``folder`` in name order; symlinks that lead out
    of the roots are skipped."""
    suffixes = IMAGE_SUFFIXES | VIDEO_SUFFIXES if videos else IMAGE_SUFFIXES
    return iter_files(folder, suffixes=suffixes, recursive=recursive, roots=roots)


def iter_files(folder: Path, *, suffixes: Collection[str], recursive: bool, roots: list[Path]) -> Iterator[Path]:
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
