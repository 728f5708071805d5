"""A document item's stored answers (``DocumentPart``): each OCR page, map chunk and reduce group is stored the moment
its round is back, so a redelivered document reuses what is done. Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from vlbatch.db import bulk
from vlbatch.db.models import DocumentPart, utcnow

__all__ = ["parts_of", "store_part", "token_totals"]


def store_part(
    session: Session,
    *,
    item_id: int,
    stage: str,
    idx: int,
    pages: Sequence[int],
    output: dict[str, Any],
    input_tokens: int,
    prompt_tokens: int,
    completion_tokens: int,
) -> None:
    """Store one answer, replacing an earlier attempt's answer of the same item, stage and index."""
    values = {
        "item_id": item_id,
        "stage": stage,
        "idx": idx,
        "pages": list(pages),
        "output": output,
        "input_tokens": input_tokens,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "created_at": utcnow(),
    }
    session.execute(bulk.upsert(session, DocumentPart, values, keys=["item_id", "stage", "idx"]))


def parts_of(session: Session, *, item_id: int) -> dict[tuple[str, int], dict[str, Any]]:
    """(stage, index) -> answer of every stored part of the item."""
    stored = session.scalars(select(DocumentPart).where(DocumentPart.item_id == item_id))
    return {(p.stage, p.idx): dict(p.output or {}) for p in stored}


def token_totals(session: Session, *, item_id: int) -> tuple[int, int]:
    """(prompt, completion) tokens of every stored part of the item, earlier attempts' included."""
    prompt, completion = session.execute(
        select(
            func.coalesce(func.sum(DocumentPart.prompt_tokens), 0),
            func.coalesce(func.sum(DocumentPart.completion_tokens), 0),
        ).where(DocumentPart.item_id == item_id)
    ).one()
    return int(prompt), int(completion)
