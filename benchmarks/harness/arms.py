"""The arm registry: name -> arm function (``result.ArmFn``). Importing it loads no engine."""

from __future__ import annotations

from collections.abc import Iterable

from benchmarks.harness.embedded import run_embedded_arm
from benchmarks.harness.raw import run_raw
from benchmarks.harness.result import ArmFn
from benchmarks.harness.serve import run_serve_c1, run_serve_c32
from benchmarks.harness.service import run_service
from benchmarks.harness.spec import ARM_NAMES
from vlbatch.errors import UNKNOWN_ARM, VlbatchError

__all__ = ["ARMS", "ArmFn", "UnknownArm", "parse_arms", "select_arms"]

ARMS: dict[str, ArmFn] = {
    "raw": run_raw,
    "embedded": run_embedded_arm,
    "service": run_service,
    "serve_c1": run_serve_c1,
    "serve_c32": run_serve_c32,
}


class UnknownArm(VlbatchError):
    """An arm name that is not in the registry; the message lists the known ones."""

    code = UNKNOWN_ARM


def parse_arms(text: str | Iterable[str] | None, known: Iterable[str] | None = None) -> tuple[str, ...]:
    """Arm names from ``raw,serve_c32`` (None or ``all``: every known arm), in the canonical order of
    ``spec.ARM_NAMES`` first, then the rest as registered; duplicates dropped."""
    known_list = list(known if known is not None else ARMS)
    order = [n for n in ARM_NAMES if n in known_list] + [n for n in known_list if n not in ARM_NAMES]
    if text is None or (isinstance(text, str) and text.strip() in ("", "all")):
        return tuple(order)
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    unknown = [n for n in names if n not in known_list]
    if unknown:
        raise UnknownArm(f"unknown arm {', '.join(repr(n) for n in unknown)}; known arms: {', '.join(order)}")
    if not names:
        raise UnknownArm(f"no arm given; known arms: {', '.join(order)}")
    return tuple(n for n in order if n in names)


def select_arms(names: Iterable[str], registry: dict[str, ArmFn] | None = None) -> dict[str, ArmFn]:
    """The registry's functions for ``names``, in that order (``UnknownArm`` for a missing one)."""
    reg = ARMS if registry is None else registry
    picked = parse_arms(list(names), reg)
    return {n: reg[n] for n in picked}
