"""``exiftool`` (Debian's libimage-exiftool-perl) as the reader of what photo managers read: tags by group, lists
as lists. Skips when it is missing locally, fails under CI (``scripts/test.sh`` installs it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest


def exiftool_tags(path: Path, *, iptc_charset: str = "UTF8") -> dict[str, Any]:
    """Every tag exiftool reads in ``path``, named ``group:tag`` (``XMP-digiKam:TagsList``, ``IPTC:Keywords``);
    IPTC without a CodedCharacterSet read as ``iptc_charset`` (``Latin`` for what older tools wrote)."""
    if shutil.which("exiftool") is None:
        message = "exiftool is not installed (apt-get install libimage-exiftool-perl)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    proc = subprocess.run(
        ["exiftool", "-json", "-G1", "-struct", "-charset", f"iptc={iptc_charset}", str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    tags: dict[str, Any] = json.loads(proc.stdout)[0]
    return tags


def as_list(value: Any) -> list[Any]:
    """exiftool writes a one-item list as its item."""
    return value if isinstance(value, list) else [value]
