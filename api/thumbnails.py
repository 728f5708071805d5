"""Thumbnails for the results browser: made once per item, cached on disk, never the full image.

A thumbnail is the item's first image, upright, at most ``SIZE`` pixels on its long side, as JPEG, under
``<data_dir>/thumbs/<job>/<item>.jpg``; the next request serves the file. Only local files inside the input roots
of the job's tenant (``vlbatch.db.tenants.roots_of``, the roots its worker reads under; a cached thumbnail too is
served only while its source lies inside them) and data URLs are read: the API process does not fetch URLs for a
page view (the worker's fetch policy applies to jobs, not to browsing), so a URL item shows no thumbnail.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from preprocessing.errors import InputError
from preprocessing.images import decode_image, load_source
from vlbatch.inputs import lexically_inside
from vlbatch.settings import Settings

__all__ = ["SIZE", "thumbnail_path"]

SIZE = 256


def _first_local_image(inputs: object) -> str | None:
    images = inputs.get("images") if isinstance(inputs, dict) else None
    if not isinstance(images, list) or not images or not isinstance(images[0], str):
        return None
    source = images[0]
    return None if source[:8].lower().startswith(("http://", "https://")) else source


def thumbnail_path(
    settings: Settings, *, job_id: str, item_id: int, inputs: object, roots: Sequence[Path]
) -> Path | None:
    """The cached thumbnail of an item, made now if missing; None when it has no local image, the image lies
    outside ``roots`` (the job's tenant's input roots) or it does not decode (the page then shows the item's error
    instead)."""
    source = _first_local_image(inputs)
    if source is None:
        return None
    if not source.startswith("data:") and not lexically_inside(source.removeprefix("file://"), roots):
        return None
    target = settings.data_dir / "thumbs" / job_id / f"{item_id}.jpg"
    if target.exists():
        return target
    try:
        data = load_source(
            source,
            allowed_roots=list(roots),
            max_bytes=settings.max_input_bytes,
            url_timeout_s=settings.url_timeout_s,
        )
        img = decode_image(data, draft_size=(2 * SIZE, 2 * SIZE))
    except InputError:
        return None
    img.thumbnail((SIZE, SIZE))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".thumb.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            img.save(fh, format="JPEG", quality=80)
        os.replace(tmp, target)  # two requests racing write the same bytes; the rename keeps one whole file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
