"""Duplicates run once: a stored answer for the same bytes, processed with the same marker by the same tenant.

A result is reusable when its item succeeded, its ``content_hash`` is the duplicate's, its processed-with marker
(model, model revision, pipeline version, options hash; invariant 7) is the duplicate's job's, and its job belongs
to the same tenant: another tenant's answer is never handed out, whatever its bytes. Keyword-only arguments; no
HTTP errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from vlbatch.db.models import Item, ItemStatus, Job, Result
from vlbatch.db.outcomes import Marker

__all__ = ["Reusable", "find_reusable"]


@dataclass(frozen=True)
class Reusable:
    """A stored answer a duplicate takes as its own: ``origin`` is the item the engine answered."""

    origin: int
    output: dict[str, Any] | None
    raw_text: str | None
    prompt_hash: str | None = None  # of the prompt the engine answered


def find_reusable(session: Session, *, tenant: str, content_hash: str, marker: Marker) -> Reusable | None:
    """The oldest stored answer for ``content_hash`` that ``tenant`` made with ``marker``, or None. One indexed
    lookup (``ix_results_content_hash``); a reused result points at the item whose answer it carries, so chains of
    copies all name the one item the engine answered."""
    revision = (
        Result.model_revision.is_(None)
        if marker.model_revision is None
        else Result.model_revision == marker.model_revision
    )
    row = session.execute(
        select(Result.item_id, Result.reused_from, Result.output, Result.raw_text, Result.prompt_hash)
        .join(Item, Item.id == Result.item_id)
        .join(Job, Job.id == Result.job_id)
        .where(
            Result.content_hash == content_hash,
            Job.tenant == tenant,
            Result.model == marker.model,
            revision,
            Result.pipeline_version == marker.pipeline_version,
            Result.options_hash == marker.options_hash,
            Item.status == ItemStatus.SUCCEEDED,
        )
        .order_by(Result.item_id)
        .limit(1)
    ).first()
    if row is None:
        return None
    item_id, reused_from, output, raw_text, prompt = row
    return Reusable(reused_from if reused_from is not None else item_id, output, raw_text, prompt)
