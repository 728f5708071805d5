"""Hostile clients against a real ``vlbatch api`` process: one row per probe, sent / got / verdict.

Each area's probes live in a module of their own (``bodies``, ``dashboard``, ``tenancy``, ``dry_runs``,
``deadlines``, ``objects``, ``decoders``, ``limits``); each exposes ``ENV`` (settings its API process needs beyond
the defaults) and ``probes(target) -> Iterator[Row]``. The runner
(``python -m benchmarks.hostile_api``) starts one API per module on a fresh SQLite database under a temp folder
and prints every row; a row's verdict is ``ok`` when the API answered as the docs promise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass(frozen=True)
class Row:
    defect: str  # the probe's short name, e.g. "D1 unauthenticated 1 GB upload"
    sent: str
    got: str
    ok: bool

    @property
    def verdict(self) -> str:
        return "ok" if self.ok else "FAIL"


@dataclass(frozen=True)
class Target:
    """One API process under probe: its URL and pid, the folder it may read inputs from (``root``) and keys."""

    base: str
    pid: int
    root: Path
    data_dir: Path
    admin_key: str
    tenant_keys: dict[str, str]  # tenant name -> secret; tenants "a" and "b"

    def headers(self, tenant: str = "a") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tenant_keys[tenant]}"}


def status_and_code(r: httpx.Response, *, otherwise: str = "") -> str:
    """What a row shows of an answer: its status and its error code (or the body's ``otherwise`` field, or nothing,
    when it has none or is not JSON)."""
    try:
        body = r.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    return f"{r.status_code} {body.get('code') or (body.get(otherwise, '') if otherwise else '')}".strip()
