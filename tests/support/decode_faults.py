"""Decoders that fail the way a hostile file makes a C decoder fail, importable by name in a decoder child process
(``worker.image_decode.IsolatedDecoder(decode=...)``)."""

from __future__ import annotations

import ctypes
import time
from typing import Any


def segfault(data: bytes, **_: Any) -> Any:
    return ctypes.string_at(0)  # a read of address 0: SIGSEGV


def hang(data: bytes, **_: Any) -> Any:
    time.sleep(3600)


def balloon(data: bytes, **_: Any) -> Any:
    return bytearray(8 * 1024**3)  # far above any test cap: MemoryError under RLIMIT_AS
