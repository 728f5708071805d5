"""A tagging job's answers written back where photo managers look: XMP sidecars, and optionally JPEG copies
that carry the same XMP inside and the keywords and caption as IPTC too. Originals are never written.

Sidecars are named ``photo.jpg.xmp`` (darktable, digiKam and Immich read this name) or, with
``naming="stem"``, ``photo.xmp`` (Lightroom's). They go beside the photos or into ``out_dir``, mirroring the
photos' paths below ``relative_to``, and never outside ``out_dir`` (a stored path's ``..`` is folded first; one
that would still climb out is an error, not a write). With ``roots`` (a tenant's own output roots) a sidecar
beside a photo is written only inside them. A sidecar that exists and was not written by vlbatch (a person's edits, a
photo manager's own) is left as it is and counted, unless ``force``; one of ours is replaced, so a re-run
refreshes it. Every file is written to a temporary name and renamed, so a reader never sees half a packet.

The model's keywords go under ``keyword_root`` (the mark, ``VLBATCH_XMP_KEYWORD_ROOT``), those a person added by
hand in vlbatch stand unmarked; each packet names the answer's provenance (``xmp_packet.Provenance``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy.orm import Session

from jobs.exports.iptc import iptc_resources
from jobs.exports.xmp_packet import DEFAULT_KEYWORD_ROOT, Provenance, XmpError, is_ours, jpeg_with_xmp, xmp_packet
from vlbatch.db.models import ItemStatus, TagSource
from vlbatch.db.results import ResultRecord, iter_results
from vlbatch.files import write_atomically
from vlbatch.paths import is_local, lexically_inside, local_path

__all__ = ["SidecarReport", "sidecar_path", "write_job_sidecars"]

Naming = Literal["ext", "stem"]
_JPEG_SUFFIXES = {".jpg", ".jpeg", ".jpe"}


@dataclass
class SidecarReport:
    written: int = 0
    kept_foreign: int = 0  # an existing sidecar not written by vlbatch, left untouched
    jpeg_copies: int = 0
    skipped_not_local: int = 0  # URL and data-URL inputs have no place for a sidecar
    skipped_failed: int = 0
    skipped_outside_roots: int = 0  # beside a photo outside the tenant's output roots
    errors: int = 0


def _placed(image: Path, out_dir: Path | None, relative_to: Path | None) -> Path:
    """Where ``image``'s derived files go: beside it, or in ``out_dir`` at its path below ``relative_to``
    (its whole absolute path when it is not below it); ``XmpError`` when that would leave ``out_dir``."""
    image = Path(os.path.normpath(image))
    if out_dir is None:
        return image
    if relative_to is not None and image.is_relative_to(os.path.normpath(relative_to)):
        below = image.relative_to(os.path.normpath(relative_to))
    else:
        below = image.relative_to(image.anchor) if image.anchor else image
    placed = Path(os.path.normpath(out_dir / below))
    if not placed.is_relative_to(os.path.normpath(out_dir)) or placed == Path(os.path.normpath(out_dir)):
        raise XmpError(f"{image}: its file would land outside {out_dir}")
    return placed


def sidecar_path(image: Path, *, out_dir: Path | None, relative_to: Path | None, naming: Naming = "ext") -> Path:
    placed = _placed(image, out_dir, relative_to)
    return placed.with_name(placed.name + ".xmp") if naming == "ext" else placed.with_suffix(".xmp")


def _local_images(inputs: Any) -> list[Path] | None:
    images = inputs.get("images") if isinstance(inputs, dict) else None
    if not isinstance(images, list) or not images:
        return None
    paths = []
    for source in images:
        if not isinstance(source, str) or not is_local(source):
            return None
        paths.append(Path(local_path(source)))
    return paths


def write_job_sidecars(
    session: Session,
    *,
    job_id: str,
    out_dir: Path | None = None,
    relative_to: Path | None = None,
    naming: Naming = "ext",
    jpeg_copies: Path | None = None,
    force: bool = False,
    keyword_root: str = DEFAULT_KEYWORD_ROOT,
    roots: Sequence[Path] | None = None,
) -> SidecarReport:
    """Write a sidecar (and a JPEG copy into ``jpeg_copies``, when given) for every image of every succeeded
    item of ``job_id``; the items of a burst share their answer. Streams the results: memory stays one page."""
    report = SidecarReport()
    for page in iter_results(session, job_id=job_id, with_inputs=True):
        for record in page:
            output = record.output if record.status == ItemStatus.SUCCEEDED else None
            if not isinstance(output, dict):
                report.skipped_failed += 1
                continue
            images = _local_images(record.inputs)
            if images is None:
                report.skipped_not_local += 1
                continue
            tags = record.tag_names or []  # hand edits included
            packet = xmp_packet(
                tags,
                record.caption,
                job_id=job_id,
                keyword_root=keyword_root,
                manual=_added_by_hand(record),
                provenance=_provenance(record),
            )
            iptc = iptc_resources(tags, record.caption) if jpeg_copies is not None else None
            for image in images:
                if out_dir is None and roots is not None and not lexically_inside(image, roots):
                    report.skipped_outside_roots += 1
                    continue
                _write_for_image(image, packet, iptc, report, out_dir, relative_to, naming, jpeg_copies, force)
    return report


def _added_by_hand(record: ResultRecord) -> set[str]:
    return {t["tag"] for t in record.tags or [] if isinstance(t, dict) and t.get("source") == TagSource.MANUAL}


def _provenance(record: ResultRecord) -> Provenance:
    return Provenance(
        model=record.model,
        model_revision=record.model_revision,
        pipeline_version=record.pipeline_version,
        options_hash=record.options_hash,
        prompt_hash=record.prompt_hash,
    )


def _write_for_image(
    image: Path,
    packet: bytes,
    iptc: bytes | None,
    report: SidecarReport,
    out_dir: Path | None,
    relative_to: Path | None,
    naming: Naming,
    jpeg_copies: Path | None,
    force: bool,
) -> None:
    try:
        target = sidecar_path(image, out_dir=out_dir, relative_to=relative_to, naming=naming)
    except XmpError:
        report.errors += 1
        return
    if target.exists() and not force and not is_ours(target.read_bytes()):
        report.kept_foreign += 1
    else:
        write_atomically(target, packet)
        report.written += 1
    if jpeg_copies is None or image.suffix.lower() not in _JPEG_SUFFIXES:
        return
    try:
        copy = _placed(image, jpeg_copies, relative_to)
    except XmpError:
        report.errors += 1
        return
    if copy.resolve() == image.resolve():
        raise XmpError(f"{copy}: a JPEG copy would overwrite the original; choose another folder")
    try:
        write_atomically(copy, jpeg_with_xmp(image.read_bytes(), packet, iptc=iptc))
        report.jpeg_copies += 1
    except (XmpError, OSError):
        report.errors += 1
