"""Writing a file that readers never see half-written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(target: Path, data: bytes) -> None:
    """``data`` to a temporary file beside ``target`` (its folder made if missing), then renamed over it: a reader
    sees the old file or the new one whole, and two writers racing each leave one whole file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
