"""An item's tags with their sources: the model's, merged with the operator's edits.

The model's tags are its result's ``output["tags"]``; an operator adds or removes tags by hand (``TagEdit``, one
row per item and tag, the latest edit). ``Result.tags`` holds the merge, each tag as ``{"tag", "source", "by",
"at"}`` (``by``/``at`` for a manual tag): the model's tags in their order less those removed by hand, then the
tags added by hand (a tag both the model gave and a person added counts as manual, so a later answer without
it keeps it). Every result written (``outcomes.record_outcomes``) and every edit rewrites the merge, so a re-run
replaces the model's tags and keeps the person's, removals included. An item takes at most ``max_edits`` tags
edited by hand (``TooManyManualTags`` past it): each edit rewrites the merge and every page and export carries
it, so an unbounded list made every later edit and page slower. Keyword-only arguments; no HTTP errors.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from vlbatch.db.models import Item, Result, TagEdit, TagSource, utcnow
from vlbatch.errors import TOO_MANY_MANUAL_TAGS, VlbatchError

__all__ = [
    "MAX_TAG_CHARS",
    "TooManyManualTags",
    "carry_edits",
    "edit_tags",
    "edits_for",
    "job_edits",
    "merged_tags",
    "model_tags",
    "tag_names",
    "tags_json",
]

MAX_TAG_CHARS = 200  # TagEdit.tag's column


class TooManyManualTags(VlbatchError):
    code = TOO_MANY_MANUAL_TAGS


def model_tags(output: Any) -> list[str] | None:
    """The tags of a result's output, or None when the output has no tag list (a document's answer)."""
    tags = output.get("tags") if isinstance(output, dict) else None
    if not isinstance(tags, list):
        return None
    return [t for t in tags if isinstance(t, str)]


def _entry(tag: str, source: TagSource, by: str | None = None, at: datetime | None = None) -> dict[str, Any]:
    if at is not None and at.tzinfo is None:  # SQLite hands timestamps back naive; they are stored as UTC
        at = at.replace(tzinfo=UTC)
    return {"tag": tag, "source": source.value, "by": by, "at": at.isoformat() if at is not None else None}


def merged_tags(output: Any, edits: Sequence[TagEdit]) -> list[dict[str, Any]] | None:
    """The model's tags (from ``output``) merged with an item's edits; None when there are neither."""
    from_model = model_tags(output)
    if from_model is None and not edits:
        return None
    manual = {e.tag for e in edits}  # removed, or added (then listed as manual below)
    merged = [_entry(t, TagSource.MODEL) for t in dict.fromkeys(from_model or []) if t not in manual]
    added = sorted((e for e in edits if e.added), key=lambda e: (e.created_at, e.id or 0))
    merged += [_entry(e.tag, TagSource.MANUAL, e.author, e.created_at) for e in added]
    return merged


def tag_names(tags: Any, output: Any) -> list[str]:
    """Plain tag names of a result: its merged ``tags`` (decoded JSON), else (a result written before tags had
    sources) its output's."""
    if isinstance(tags, list):
        return [t["tag"] for t in tags if isinstance(t, dict) and isinstance(t.get("tag"), str)]
    return model_tags(output) or []


def tags_json(tags_text: str | None, output_text: str | None) -> str:
    """``Result.tags`` as stored JSON text for an export; for a result written before tags had sources, the
    merge of its output's tags alone (all from the model)."""
    if tags_text is not None:
        return tags_text
    output = json.loads(output_text) if output_text else None
    return json.dumps(merged_tags(output, []))


def edits_for(session: Session, *, item_ids: Iterable[int]) -> dict[int, list[TagEdit]]:
    """The edits of these items, by item id (items without edits are absent)."""
    ids = list(item_ids)
    found: dict[int, list[TagEdit]] = defaultdict(list)
    for start in range(0, len(ids), 1000):
        for edit in session.scalars(select(TagEdit).where(TagEdit.item_id.in_(ids[start : start + 1000]))):
            found[edit.item_id].append(edit)
    return found


def edit_tags(
    session: Session, *, item_id: int, add: Sequence[str], remove: Sequence[str], author: str, max_edits: int
) -> list[dict[str, Any]] | None:
    """Add and remove tags on an item's result by hand (a tag in both lists is added) and rewrite its merged
    tags; returns them. None, and nothing written, when the item has no result yet; ``TooManyManualTags``, and
    nothing written, when the item would then hold more than ``max_edits`` edited tags."""
    result = session.get(Result, item_id)
    if result is None:
        return None
    now = utcnow()
    wanted = {t: False for t in remove} | {t: True for t in add}
    if wanted:
        kept = session.scalar(
            select(func.count())
            .select_from(TagEdit)
            .where(TagEdit.item_id == item_id, TagEdit.tag.not_in(list(wanted)))
        )
        if int(kept or 0) + len(wanted) > max_edits:
            raise TooManyManualTags(
                f"item {item_id} would have {int(kept or 0) + len(wanted)} tags edited by hand; "
                f"the limit is {max_edits} (VLBATCH_MAX_MANUAL_TAGS)"
            )
        session.execute(delete(TagEdit).where(TagEdit.item_id == item_id, TagEdit.tag.in_(list(wanted))))
        session.add_all(
            TagEdit(item_id=item_id, tag=t, added=added, author=author, created_at=now) for t, added in wanted.items()
        )
        session.flush()
    edits = edits_for(session, item_ids=[item_id]).get(item_id, [])
    tags = merged_tags(result.output, edits)
    session.execute(update(Result).where(Result.item_id == item_id).values(tags=tags))
    return tags


def job_edits(session: Session, *, job_id: str) -> list[TagEdit]:
    """Every tag edit on the job's items (one query; most jobs have none)."""
    return list(session.scalars(select(TagEdit).join(Item, Item.id == TagEdit.item_id).where(Item.job_id == job_id)))


def carry_edits(session: Session, *, edits: Sequence[TagEdit], new_item_of: dict[int, int]) -> int:
    """Copy ``edits`` to the new items ``new_item_of`` maps their items to (a re-run's items; edits of items
    not re-run are left): the new job's results are merged with them as they are written. Returns the edits
    copied."""
    copies = [
        TagEdit(item_id=new_item_of[e.item_id], tag=e.tag, added=e.added, author=e.author, created_at=e.created_at)
        for e in edits
        if e.item_id in new_item_of
    ]
    session.add_all(copies)
    session.flush()
    return len(copies)
