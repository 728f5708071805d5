"""Each tenant's roots: the folders its jobs may read inputs from and write document files into.

The rule: ``VLBATCH_ALLOWED_INPUT_ROOTS`` is the outer bound. An admin gives a tenant roots of its own
(``vlbatch keys roots``), each inside one of the global roots, or it is refused; a tenant's output roots default to
its input roots. A tenant with no roots of its own uses the global roots (one tenant, or trusted tenants), or
nothing at all with ``VLBATCH_TENANT_ROOTS_REQUIRED``. A root the global roots no longer hold (they were narrowed
after it was set) is dropped when it is read, so the bound holds without re-setting every tenant.

Every reader of a client-named path asks ``roots_of`` for the tenant the job belongs to: job creation (folders,
inline documents, ``output_dir``), the worker's reads and writes, thumbnails, sidecars. Keyword-only; no HTTP errors.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from vlbatch.db.models import TenantRoots, utcnow
from vlbatch.errors import INVALID_TENANT_ROOTS, VlbatchError
from vlbatch.settings import Settings

__all__ = ["Roots", "clear_roots", "list_roots", "roots_of", "set_roots"]


@dataclass(frozen=True)
class Roots:
    """What a tenant may read (``inputs``) and write into (``outputs``); ``own``: set for it, not the global ones."""

    inputs: list[Path]
    outputs: list[Path]
    own: bool = False


def _within(path: Path, bounds: Sequence[Path]) -> bool:
    real = Path(os.path.realpath(path))
    return any(real.is_relative_to(os.path.realpath(b)) for b in bounds)


def roots_of(session: Session, settings: Settings, tenant: str) -> Roots:
    """The roots of ``tenant``'s jobs now: its own, inside the global roots, or the global ones (see the module)."""
    outer = list(settings.allowed_input_roots)
    row = session.get(TenantRoots, tenant)
    if row is None:
        return Roots([], [], own=True) if settings.tenant_roots_required else Roots(outer, outer)
    inputs = [Path(r) for r in row.input_roots if _within(Path(r), outer)]
    outputs = inputs if row.output_roots is None else [Path(r) for r in row.output_roots if _within(Path(r), outer)]
    return Roots(inputs, outputs, own=True)


def _checked(raw: Sequence[str], outer: Sequence[Path], what: str) -> list[str]:
    checked = []
    for text in raw:
        path = Path(text).expanduser()
        if not path.is_absolute():
            raise VlbatchError(f"{what} root '{text}' is not an absolute path", code=INVALID_TENANT_ROOTS)
        if not _within(path, outer):
            bounds = ", ".join(map(str, outer)) or "none (set VLBATCH_ALLOWED_INPUT_ROOTS)"
            raise VlbatchError(
                f"{what} root '{text}' is outside the global roots ({bounds}); a tenant's roots lie inside them",
                code=INVALID_TENANT_ROOTS,
            )
        checked.append(os.path.realpath(path))
    return checked


def set_roots(
    session: Session, settings: Settings, *, tenant: str, inputs: Sequence[str], outputs: Sequence[str] | None = None
) -> TenantRoots:
    """Give ``tenant`` its own roots (resolved; each inside a global root, else ``INVALID_TENANT_ROOTS``), replacing
    any it had; ``outputs`` None: its input roots."""
    outer = list(settings.allowed_input_roots)
    row = session.get(TenantRoots, tenant) or TenantRoots(tenant=tenant)
    row.input_roots = _checked(inputs, outer, "input")
    row.output_roots = None if outputs is None else _checked(outputs, outer, "output")
    row.updated_at = utcnow()
    session.add(row)
    session.flush()
    return row


def clear_roots(session: Session, *, tenant: str) -> bool:
    """Drop ``tenant``'s own roots (back to the default); False when it had none."""
    return bool(session.execute(delete(TenantRoots).where(TenantRoots.tenant == tenant)).rowcount)  # type: ignore[attr-defined]


def list_roots(session: Session) -> list[TenantRoots]:
    return list(session.scalars(select(TenantRoots).order_by(TenantRoots.tenant)))
