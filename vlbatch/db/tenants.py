"""Each tenant's roots: the folders its jobs may read inputs from and write document files into, and the
object-store (``s3://``) prefixes they may read.

The rule: ``VLBATCH_ALLOWED_INPUT_ROOTS`` and ``VLBATCH_ALLOWED_S3_PREFIXES`` are the outer bounds. An admin gives a
tenant roots and prefixes of its own (``vlbatch keys roots``), each inside one of the global ones, or it is
refused; a tenant's output roots default to its input roots. A tenant with no roots (or prefixes) of its own uses
the global ones (one tenant, or trusted tenants), or nothing at all with ``VLBATCH_TENANT_ROOTS_REQUIRED``: bucket
names are global, so without prefixes of its own every tenant could read every allowed bucket. A root or prefix
the global ones no longer hold (they were narrowed after it was set) is dropped when it is read, so the bound holds
without re-setting every tenant.

Every reader of a client-named path asks ``roots_of`` for the tenant the job belongs to: job creation (folders,
inline documents, ``output_dir``), the worker's reads and writes, thumbnails, sidecars. The worker asks once per
job and carries the answer in the job's plan (``worker.held_items.JobPlan.roots``) to every reader of the item.
Keyword-only; no HTTP errors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from vlbatch.db.models import TenantRoots, utcnow
from vlbatch.errors import INVALID_TENANT_ROOTS, VlbatchError
from vlbatch.paths import inside
from vlbatch.settings import Settings

__all__ = ["Roots", "clear_roots", "global_roots", "list_roots", "roots_of", "s3_within", "set_roots"]

# s3://bucket or s3://bucket/prefix, as VLBATCH_ALLOWED_S3_PREFIXES reads them
_S3_PREFIX = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?")


@dataclass(frozen=True)
class Roots:
    """What a tenant may read (``inputs``, and under ``s3_prefixes`` in object storage) and write into
    (``outputs``); ``own``: its local roots are set for it, not the global ones."""

    inputs: list[Path]
    outputs: list[Path]
    own: bool = False
    s3_prefixes: list[str] = field(default_factory=list)


def _s3_parts(prefix: str) -> tuple[str, str] | None:
    """(bucket, key prefix without its slashes) of an ``s3://`` prefix; None when it is not one, or has a ``.`` or
    ``..`` segment."""
    match = _S3_PREFIX.fullmatch(prefix)
    if match is None:
        return None
    key = (match.group(2) or "").strip("/")
    if any(part in {".", ".."} for part in key.split("/")):
        return None
    return match.group(1), key


def s3_within(prefix: str, bounds: Sequence[str]) -> bool:
    """``prefix`` lies under one of ``bounds``, whole key segment by whole segment (``s3://b/ab`` is not under
    ``s3://b/a``)."""
    inner = _s3_parts(prefix)
    if inner is None:
        return False
    for bound in bounds:
        outer = _s3_parts(bound)
        same_bucket = outer is not None and outer[0] == inner[0]
        if same_bucket and outer is not None and (not outer[1] or f"{inner[1]}/".startswith(f"{outer[1]}/")):
            return True
    return False


def global_roots(settings: Settings) -> Roots:
    """The global roots (``VLBATCH_ALLOWED_INPUT_ROOTS``, ``VLBATCH_ALLOWED_S3_PREFIXES``): a tenant's with none of
    its own, and a reader's with no tenant (a benchmark, a test)."""
    outer = list(settings.inputs.allowed_input_roots)
    return Roots(outer, outer, s3_prefixes=list(settings.inputs.allowed_s3_prefixes))


def roots_of(session: Session, settings: Settings, tenant: str) -> Roots:
    """The roots of ``tenant``'s jobs now: its own, inside the global roots, or the global ones (see the module)."""
    outer = list(settings.inputs.allowed_input_roots)
    outer_s3 = list(settings.inputs.allowed_s3_prefixes)
    default_s3 = [] if settings.inputs.tenant_roots_required else outer_s3
    row = session.get(TenantRoots, tenant)
    if row is None:
        return Roots([], [], own=True) if settings.inputs.tenant_roots_required else global_roots(settings)
    inputs = [Path(r) for r in row.input_roots if inside(r, outer)]
    outputs = inputs if row.output_roots is None else [Path(r) for r in row.output_roots if inside(r, outer)]
    s3 = default_s3 if row.s3_prefixes is None else [p for p in row.s3_prefixes if s3_within(p, outer_s3)]
    return Roots(inputs, outputs, own=True, s3_prefixes=s3)


def _checked(raw: Sequence[str], outer: Sequence[Path], what: str) -> list[str]:
    checked = []
    for text in raw:
        path = Path(text).expanduser()
        if not path.is_absolute():
            raise VlbatchError(f"{what} root '{text}' is not an absolute path", code=INVALID_TENANT_ROOTS)
        if not inside(path, outer):
            bounds = ", ".join(map(str, outer)) or "none (set VLBATCH_ALLOWED_INPUT_ROOTS)"
            raise VlbatchError(
                f"{what} root '{text}' is outside the global roots ({bounds}); a tenant's roots lie inside them",
                code=INVALID_TENANT_ROOTS,
            )
        checked.append(os.path.realpath(path))
    return checked


def _checked_s3(raw: Sequence[str], outer: Sequence[str]) -> list[str]:
    checked = []
    for prefix in raw:
        parts = _s3_parts(prefix.strip())
        if parts is None:
            raise VlbatchError(
                f"object-store prefix '{prefix[:200]}' is not s3://bucket or s3://bucket/prefix",
                code=INVALID_TENANT_ROOTS,
            )
        normal = f"s3://{parts[0]}/{parts[1]}" if parts[1] else f"s3://{parts[0]}"
        if not s3_within(normal, outer):
            bounds = ", ".join(outer) or "none (set VLBATCH_ALLOWED_S3_PREFIXES)"
            raise VlbatchError(
                f"object-store prefix '{prefix[:200]}' is outside the global prefixes ({bounds}); a tenant's prefixes "
                "lie inside them",
                code=INVALID_TENANT_ROOTS,
            )
        checked.append(normal)
    return checked


def set_roots(
    session: Session,
    settings: Settings,
    *,
    tenant: str,
    inputs: Sequence[str],
    outputs: Sequence[str] | None = None,
    s3_prefixes: Sequence[str] | None = None,
) -> TenantRoots:
    """Give ``tenant`` its own roots (resolved; each inside a global root, else ``INVALID_TENANT_ROOTS``), replacing
    any it had; ``outputs`` None: its input roots; ``s3_prefixes`` None: none of its own (the global prefixes, or
    none with ``VLBATCH_TENANT_ROOTS_REQUIRED``)."""
    outer = list(settings.inputs.allowed_input_roots)
    row = session.get(TenantRoots, tenant) or TenantRoots(tenant=tenant)
    row.input_roots = _checked(inputs, outer, "input")
    row.output_roots = None if outputs is None else _checked(outputs, outer, "output")
    row.s3_prefixes = None if s3_prefixes is None else _checked_s3(s3_prefixes, settings.inputs.allowed_s3_prefixes)
    row.updated_at = utcnow()
    session.add(row)
    session.flush()
    return row


def clear_roots(session: Session, *, tenant: str) -> bool:
    """Drop ``tenant``'s own roots (back to the default); False when it had none."""
    return bool(session.execute(delete(TenantRoots).where(TenantRoots.tenant == tenant)).rowcount)  # type: ignore[attr-defined]


def list_roots(session: Session) -> list[TenantRoots]:
    return list(session.scalars(select(TenantRoots).order_by(TenantRoots.tenant)))
