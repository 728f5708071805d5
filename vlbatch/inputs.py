"""Server-side directory listing for jobs, confined to the configured input roots."""

from __future__ import annotations

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
    """Files with one of ``suffixes`` below ``folder`` in name order; links leading out of the roots are skipped."""
    pattern = "**/*" if recursive else "*"
    for p in sorted(folder.glob(pattern)):
        if p.suffix.lower() in suffixes and p.is_file():
            real = p.resolve()
            if any(real.is_relative_to(r.resolve()) for r in roots):
                yield real
