"""The one rule for a client-named local path: is it local, and does it lie inside these roots.

Every reader of a path a client named (job creation, the dry run, the worker's image, clip and document readers,
thumbnails, templates and the nightly inbox, XMP sidecars, the tenant roots themselves) asks here, and a refusal
is one error, ``PathRefused``. The rule, in order:

- ``file://`` (any case) names the same path without it; anything else with a scheme (``http://``, ``s3://``) or
  a data URL is not local and not judged here.
- Lexically first: the path made absolute with ``..`` folded, nothing on disk looked at, must lie inside a root
  (as given or resolved). A path outside every root is refused the same way whether it exists or not, so the
  answer tells nothing about the disk outside them.
- Then resolved (every symlink and ``..`` followed): it must still land inside a resolved root. A symlink inside
  a root that leads out of them is refused as outside.
- Only a path inside the roots may be told apart as missing (``PathRefused.missing``).

The refusal names no root (a client must not learn the server's folders or another tenant's), only whether any are
configured.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from vlbatch.errors import INPUT_PATH_REFUSED, VlbatchError

__all__ = [
    "Confinement",
    "PathRefused",
    "confined",
    "inside",
    "is_local",
    "lexically_inside",
    "local_path",
    "normalised",
]

_FILE = "file://"


class PathRefused(VlbatchError):
    """A client-named path outside the roots, missing (``missing``: only ever inside them), or not of the kind
    asked for. The API answers it as ``input_path_refused``; an item's reader turns it into the item's code."""

    code = INPUT_PATH_REFUSED

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def is_local(source: str) -> bool:
    """Whether ``source`` names a file on the server's disk (a path or a ``file://`` URL), not a URL of another
    scheme or a data URL."""
    lowered = source[:16].lower()
    return lowered.startswith(_FILE) or not (lowered.startswith("data:") or "://" in lowered)


def local_path(source: str) -> str:
    """The path a local ``source`` names: without its ``file://`` (any case)."""
    return source[len(_FILE) :] if source[: len(_FILE)].lower() == _FILE else source


def normalised(source: str) -> str:
    """A local path with ``.`` and ``..`` folded (``a/../b`` is ``b``), so every later reader (the worker, the
    thumbnails, ``vlbatch xmp --out``) sees the path the roots were checked on; other sources as given."""
    if not is_local(source):
        return source
    bare = local_path(source)
    return source[: len(source) - len(bare)] + os.path.normpath(bare) if bare else source


def lexically_inside(raw: str | Path, roots: Sequence[Path]) -> bool:
    """Whether ``raw``, made absolute and with ``..`` folded but nothing on disk looked at, lies inside a root (as
    given or resolved)."""
    return Confinement(roots).lexically_inside(raw)


def inside(real: str | Path, roots: Sequence[Path]) -> bool:
    """Whether ``real``, resolved, lies inside a resolved root: for a path already found on disk (a listed file
    behind a symlink, an opened descriptor's ``/proc`` link), where the lexical check has nothing to add."""
    try:
        path = Path(os.path.realpath(real))
    except (TypeError, ValueError):
        return False
    return Confinement(roots).resolved_inside(path)


class Confinement:
    """The rule against one set of roots, the roots resolved once when it is made: for many paths in one request
    (an NDJSON job's million item lines), where resolving every root again for every path cost more than the path.
    It looks at the disk as it is when made, and each folder its paths name as it is when first named (its resolved
    form is kept for the next path in it): keep one no longer than the request it serves."""

    # Resolved folders kept at once; past that the memo starts again. Its bound: so many folders of at most
    # VLBATCH_MAX_SOURCE_CHARS characters (a longer source is refused before it is confined), and their real forms.
    _FOLDERS_KEPT = 1024

    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = roots
        given = {os.path.normpath(os.path.abspath(os.path.expanduser(r))) for r in roots}
        self._real = [Path(os.path.realpath(os.path.expanduser(r))) for r in roots]
        self._real_text = [str(r) for r in self._real]
        self._exact = given | set(self._real_text)
        self._bounds = tuple(b.rstrip(os.sep) + os.sep for b in self._exact)
        self._real_exact = frozenset(self._real_text)
        self._real_bounds = tuple(r.rstrip(os.sep) + os.sep for r in self._real_text)
        self._real_folders: dict[str, str] = {}  # a folder -> its resolved form and a '/'

    def lexically_inside(self, raw: str | Path) -> bool:
        try:
            text = os.fspath(raw)
            return self._lexically_inside(text, plain=_plain(text))
        except (TypeError, ValueError):
            return False

    def _lexically_inside(self, text: str, *, plain: bool) -> bool:
        if not plain:  # a plain path is already absolute with ``..`` folded
            text = os.path.normpath(os.path.abspath(os.path.expanduser(text)))
        return text in self._exact or text.startswith(self._bounds)

    def resolved_inside(self, path: str | Path) -> bool:
        """Whether ``path``, already resolved, lies inside a resolved root."""
        text = os.fspath(path)
        return text in self._real_exact or text.startswith(self._real_bounds)

    def confined(self, raw: str, *, must_exist: bool = False, kind: Literal["file", "dir"] | None = None) -> Path:
        """``confined(raw, roots, ...)`` against these roots."""
        return Path(self.checked(raw, must_exist=must_exist, kind=kind))

    def checked(self, raw: str, *, must_exist: bool = False, kind: Literal["file", "dir"] | None = None) -> str:
        """``confined`` as text: for the many paths of one request, where building a ``Path`` for each cost more
        than the check. Strings and, for most paths, one ``lstat`` (``_resolved``)."""
        path = local_path(raw)
        plain = _plain(path)
        try:
            inside_roots = self._lexically_inside(path, plain=plain)
        except (TypeError, ValueError):
            inside_roots = False
        if not inside_roots:
            raise _refused(raw, self.roots)
        try:
            resolved, st = self._resolved(path, plain=plain)
        except ValueError as exc:  # a NUL byte
            raise PathRefused(f"'{raw}' cannot be resolved ({type(exc).__name__})", missing=True) from None
        except OSError:  # only a symlink loop gets here, as ``Path.resolve`` tells it
            raise PathRefused(f"'{raw}' cannot be resolved (RuntimeError)", missing=True) from None
        if not self.resolved_inside(resolved):
            raise _refused(raw, self.roots)
        exists = st is not None
        if kind == "file" and not (st is not None and stat.S_ISREG(st.st_mode)):
            raise PathRefused(f"'{raw}' is not a file", missing=not exists)
        if kind == "dir" and (exists or must_exist) and not (st is not None and stat.S_ISDIR(st.st_mode)):
            raise PathRefused(f"'{raw}' is not a directory", missing=not exists)
        if must_exist and not exists:
            raise PathRefused(f"'{raw}': no such file", missing=True)
        return resolved

    def _resolved(self, path: str, *, plain: bool) -> tuple[str, os.stat_result | None]:
        """``path`` resolved (every symlink and ``..`` followed, as ``os.path.realpath``) and its ``stat`` (None:
        missing); ``ValueError`` for a NUL byte, ``OSError`` (ELOOP) for a symlink loop.

        A ``plain`` path (``_plain``) whose last name is there and no symlink, or not there at all, resolves to its
        folder resolved, then that name: ``realpath`` answers exactly that, and the folder is resolved once for
        every path in it, so such a path costs one ``lstat`` instead of one for every folder on its way. Anything
        else (a symlink last, ``~``, ``..``, a relative path, any other error) is resolved whole."""
        if plain:
            try:
                st: os.stat_result | None = os.lstat(path)
            except FileNotFoundError:
                st = None
            except OSError:  # a loop or a file on the way: the whole resolve tells which
                return self._resolved_whole(path)
            if st is None or not stat.S_ISLNK(st.st_mode):
                folder, _, name = path.rpartition("/")
                real_folder = self._real_folders.get(folder)
                if real_folder is None:
                    if len(self._real_folders) >= self._FOLDERS_KEPT:
                        self._real_folders.clear()
                    real_folder = os.path.realpath(folder or "/").rstrip("/") + "/"
                    self._real_folders[folder] = real_folder
                return real_folder + name, st
        return self._resolved_whole(path)

    @staticmethod
    def _resolved_whole(path: str) -> tuple[str, os.stat_result | None]:
        resolved = os.path.realpath(os.path.expanduser(path))
        try:
            return resolved, os.stat(resolved)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise
            return resolved, None  # missing (or a name too long to be there)


def _plain(path: str) -> bool:
    """Whether ``path`` is absolute and already normalised (no ``.``, ``..``, ``//`` or trailing ``/``; not ``/``
    itself): then ``abspath`` and ``normpath`` give it back unchanged, and ``realpath`` meets no ``..``."""
    return path[:1] == "/" and path[1:2] not in ("/", "") and os.path.normpath(path) == path


def _refused(path: str, roots: Sequence[Path]) -> PathRefused:
    if not roots:
        return PathRefused(
            f"'{path}' cannot be read: no input roots are configured for this tenant "
            "(VLBATCH_ALLOWED_INPUT_ROOTS, or `vlbatch keys roots`)"
        )
    return PathRefused(f"'{path}' is outside the allowed input roots of this tenant")


def confined(
    raw: str, roots: Sequence[Path], *, must_exist: bool = False, kind: Literal["file", "dir"] | None = None
) -> Path:
    """``raw`` (a local path, ``file://`` allowed) resolved, when it lies inside ``roots`` by the rule above;
    ``PathRefused`` otherwise. ``must_exist``: a missing path inside the roots is refused too (``missing``);
    without it an inline item's image may be named before it is there. ``kind``: it must be a file, or a folder
    (``dir``: a missing one passes unless ``must_exist``, for a folder to be written into)."""
    return Confinement(roots).confined(raw, must_exist=must_exist, kind=kind)
