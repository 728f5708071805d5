"""The photo's own context as the model is told it (the tagging option ``context``): a short block of fixed format,
one line a fact, added to the prompt.

Each fact is one provider in ``PROVIDERS``: a function from the photo (its source, the facts its header gave, the
folders its job reads from) to the fact's text, or None when the photo has none (the line is left out; a block
with no line is no block). The option accepts exactly the facts that have a provider. Lines come in the table's
order, whatever the option's order, so the same photo always gets the same text; each is cut at ``MAX_FACT_CHARS``.

A burst (several photos in one item) is told the first photo's context.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

from preprocessing.keywords import DEFAULT_MARK, human_keywords
from preprocessing.places import place_of
from vlbatch.paths import is_local, local_path

__all__ = ["BEYOND_BYTES", "HEADER", "MAX_FACT_CHARS", "PROVIDERS", "Photo", "context_block"]

HEADER = "Photo context:"
MAX_FACT_CHARS = 80


@dataclass(frozen=True)
class Photo:
    """What a provider may read of one photo. ``facts``: ``preprocessing.photo_facts``' answer, without ``gps``
    unless the job keeps GPS positions (``photo_gps``); ``roots``: the folders the job reads from; ``mark``: the
    root vlbatch's own keywords are written under (``VLBATCH_XMP_KEYWORD_ROOT``), so they are never told back to
    the model as the library's; ``read_keywords``: whether the photo's keywords may be read from disk (a dry run
    past its limits reads nothing more)."""

    source: str
    facts: Mapping[str, Any] = field(default_factory=dict)
    roots: Sequence[Path] = ()
    mark: str = DEFAULT_MARK
    read_keywords: bool = True


def _date(photo: Photo) -> str | None:
    taken = photo.facts.get("taken_at")
    if not isinstance(taken, str) or len(taken) < 16:
        return None
    return f"{taken[:10]} {taken[11:16]}"  # day and minute, local time as the camera wrote it


def _place(photo: Photo) -> str | None:
    gps = photo.facts.get("gps")  # present only when the job keeps GPS positions
    if not isinstance(gps, Mapping):
        return None
    place = place_of(float(gps["latitude"]), float(gps["longitude"]))
    return place.text() if place is not None else None


def _camera(photo: Photo) -> str | None:
    make, model = photo.facts.get("make"), photo.facts.get("model")
    if model and make and str(model).lower().startswith(str(make).split()[0].lower()):
        return str(model)  # "NIKON D800", not "NIKON CORPORATION NIKON D800"
    return " ".join(str(part) for part in (make, model) if part) or None


def _local(photo: Photo) -> PurePosixPath | None:
    if not is_local(photo.source):
        return None  # a URL, an object or an inline image has no folder and no name of its own here
    source = local_path(photo.source)
    return PurePosixPath(source) if source.startswith("/") else None


def _album(photo: Photo) -> str | None:
    path = _local(photo)
    if path is None:
        return None
    for root in sorted(photo.roots, key=lambda r: len(str(r)), reverse=True):  # the innermost root holding it
        try:
            folder = path.parent.relative_to(PurePosixPath(root))
        except ValueError:
            continue
        return str(folder) if folder.parts else None  # a photo at the root is in no album
    return None


def _keywords(photo: Photo) -> str | None:
    """The keywords a person gave the photo (its sidecar, else its embedded XMP, else its IPTC:
    ``preprocessing.keywords``), sidecars read only inside the job's roots."""
    path = _local(photo)
    if path is None or not photo.read_keywords:
        return None
    told = ""
    for keyword in human_keywords(Path(path), mark=photo.mark, roots=photo.roots):
        longer = f"{told}, {keyword}" if told else keyword
        if len(longer) > MAX_FACT_CHARS:
            break  # whole keywords only: a cut word would be a new, wrong one
        told = longer
    return told or None


def _filename(photo: Photo) -> str | None:
    path = _local(photo)
    return path.name if path is not None else None


# The facts a job may ask for, in the order their lines are written.
PROVIDERS: Mapping[str, Callable[[Photo], str | None]] = MappingProxyType(
    {
        "date": _date,
        "place": _place,
        "camera": _camera,
        "album": _album,
        "keywords": _keywords,
        "filename": _filename,
    }
)


# The facts a photo's bytes do not hold (its folder, its name, its sidecar): two byte-identical copies may be told
# different ones, so an answer made with them is not the copy's answer (no reuse, ``pipelines.base``).
BEYOND_BYTES = frozenset({"album", "keywords", "filename"})


def context_block(asked: Sequence[str], photo: Photo) -> str:
    """The block of the facts ``asked`` that the photo has: ``HEADER`` then ``- name: value`` lines; "" for none."""
    lines = []
    for name, provider in PROVIDERS.items():
        if name not in asked:
            continue
        value = provider(photo)
        if value:
            text = " ".join(value.split())[:MAX_FACT_CHARS]
            lines.append(f"- {name}: {text}")
    return "\n".join([HEADER, *lines]) if lines else ""
