"""Hostile-client probes: bodies. Rows are added beside the fixes they check."""

from __future__ import annotations

from collections.abc import Iterator

from benchmarks.hostile_api import Row, Target

ENV: dict[str, str] = {}


def probes(target: Target) -> Iterator[Row]:
    yield from ()
