"""The definitions of vlbatch's error codes, one module per area; :mod:`vlbatch.errors` is the way in.

``registry`` holds the mechanism (``ErrorCode``, the one ``_CODES`` table, ``_define``, ``lookup``); each other
module registers the codes of one area with ``_define``. Callers import the constants from ``vlbatch.errors``,
which re-exports every one of them, never from here.

A code's row in the docs' table comes where it was registered, so the areas are imported here, in ``AREAS``
order, before any of them can be imported on its own: whichever module a process imports first, the registry's
order is the same. A new area module goes into ``AREAS`` (``tests/test_errors.py`` checks it).

Standard library only: every package may import ``vlbatch.errors``, and so this.
"""

from __future__ import annotations

from importlib import import_module

# Registration order, and so the order of the docs' table and of ``GET /v1/errors``.
AREAS = ("images", "video", "documents", "engine", "jobs", "batches", "access", "tools", "webhooks")

for _area in AREAS:
    import_module(f"{__name__}.{_area}")
