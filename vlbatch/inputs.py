"""Server-side directory listing for jobs, confined to the configured input roots."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from pathlib import Path

from vlbatch.errors import INPUT_PATH_REFUSED, VlbatchError

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
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
    found: list[tuple[tuple[str, ...], str]] = []
    pending: list[tuple[tuple[str, ...], str]] = [((), str(folder))]
    while pending:
        rel, directory = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)
        except OSError:  # unreadable or vanished meanwhile: listed as empty, as a glob would
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if recursive:
                        pending.append(((*rel, entry.name), entry.path))
                    continue
                if os.path.splitext(entry.name)[1].lower() not in suffixes or not entry.is_file():
                    continue
                linked = entry.is_symlink()
                path = os.path.realpath(entry.path) if linked else entry.path
            except OSError:
                continue
            if not linked or any(Path(path).is_relative_to(r) for r in real_roots):
                found.append(((*rel, entry.name), path))
    found.sort()
    for _, path in found:
        yield Path(path)
