"""What a new job is made of, checked before anything is stored: its pipeline, its options and its items.

Items come inline (a request's list) or from a folder inside ``VLBATCH_ALLOWED_INPUT_ROOTS``. A local folder is an
``ItemStream`` (``jobs.item_streams``): walked with one ``scandir`` per directory (``vlbatch.inputs.iter_file_paths``)
while its items are inserted, so a million-file job holds neither its paths nor its items; the folder is confined
(and must exist) before anything is stored, an empty one is refused at the stream's end. Every refusal is a
``JobRefused`` with its code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from jobs.item_streams import ItemStream
from jobs.refusals import JobRefused
from pipelines import registry
from pipelines.base import Pipeline, PipelineKind
from preprocessing.documents import EXTENSIONS
from preprocessing.input_errors import InputError
from preprocessing.object_store import confine_object, is_object_uri, iter_objects
from vlbatch.db import job_store
from vlbatch.errors import INVALID_ITEMS, INVALID_OPTIONS, NO_INPUTS, TOO_MANY_ITEMS, WRONG_PIPELINE_KIND
from vlbatch.inputs import IMAGE_SUFFIXES, iter_file_paths, iter_image_paths
from vlbatch.paths import Confinement, PathRefused, confined, is_local, normalised
from vlbatch.settings import Settings


def pipeline_of(name: str, kind: PipelineKind | None = None) -> Pipeline:
    """The registered pipeline ``name`` (``UnknownPipeline`` if none), refused when it is not of ``kind``."""
    pipeline = registry.get(name)
    if kind is not None and pipeline.kind != kind:
        raise JobRefused(
            WRONG_PIPELINE_KIND, f"pipeline '{name}' is a {pipeline.kind} pipeline; this route takes {kind} ones"
        )
    return pipeline


def options_of(pipeline: Pipeline, raw: dict[str, Any]) -> Any:
    """``raw`` checked by the pipeline's own ``Options`` model."""
    try:
        return pipeline.options(raw)
    except ValidationError as exc:
        # The first few faults, not all: options with a million unknown keys make a million of them.
        faults = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors()[:5])
        more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
        raise JobRefused(INVALID_OPTIONS, f"bad {pipeline.name} options: {faults}{more}") from exc


def check_inline(
    images_of_items: Sequence[Sequence[str]], settings: Settings, *, label: Callable[[int], str] = "items[{}]".format
) -> None:
    """Inline items within the per-request caps, checked before any is stored or resolved: so many items, so
    many images an item, sources so long (a data URL is bounded by the body cap alone). ``images_of_items`` has
    one entry per item: its image sources (none for a document); ``label`` names the n-th item in a refusal."""
    if len(images_of_items) > settings.limits.max_items_per_request:
        raise JobRefused(
            TOO_MANY_ITEMS,
            f"{len(images_of_items)} inline items exceed the limit of {settings.limits.max_items_per_request} a "
            "request (VLBATCH_MAX_ITEMS_PER_REQUEST); send a folder, or split the job",
        )
    for n, sources in enumerate(images_of_items):
        if len(sources) > settings.limits.max_images_per_item:
            raise JobRefused(
                INVALID_ITEMS,
                f"{label(n)} lists {len(sources)} images; the limit is {settings.limits.max_images_per_item} "
                "(VLBATCH_MAX_IMAGES_PER_ITEM)",
            )
        for k, src in enumerate(sources):
            if len(src) > settings.limits.max_source_chars and not src.startswith("data:"):
                raise JobRefused(
                    INVALID_ITEMS,
                    f"{label(n)}.images[{k}] is {len(src)} characters long; the limit is "
                    f"{settings.limits.max_source_chars} (VLBATCH_MAX_SOURCE_CHARS; data URLs excepted)",
                )


def image_items(
    settings: Settings,
    *,
    roots: Sequence[Path],
    inline: Sequence[tuple[list[str], str | None]] | None,
    directory: str | None,
    recursive: bool,
    images_per_prompt: int,
    videos: bool,
    s3_prefixes: Sequence[str],
) -> Sequence[job_store.NewItem] | ItemStream:
    """Image items: ``inline`` (images, ref) pairs (local paths confined to ``roots`` as folders are, present or
    not, and stored normalised; the worker reads them inside the same roots), or every image (and clip, with
    ``videos``) below ``directory`` inside ``roots`` (the tenant's, ``vlbatch.db.tenants.roots_of``), or below an
    ``s3://`` ``directory`` inside ``s3_prefixes`` (the tenant's, from the same answer), ``images_per_prompt`` photos
    an item."""
    if inline is not None:
        check_inline([images for images, _ in inline], settings)
        if not roots and not settings.inputs.tenant_roots_required:
            # No roots anywhere (a development API): nothing on disk is readable, by the worker (every local
            # item fails outside_roots) or by a dry run, so there is nothing to confine to and nothing to learn.
            return [
                job_store.NewItem(inputs={"images": [normalised(i) for i in images]}, ref=ref) for images, ref in inline
            ]
        rule = Confinement(roots)  # the roots resolved once for the list
        return [
            job_store.NewItem(inputs={"images": [confined_source(i, rule, s3_prefixes) for i in images]}, ref=ref)
            for images, ref in inline
        ]
    empty = JobRefused(NO_INPUTS, f"no images{' or videos' if videos else ''} found under '{directory}'")
    if directory is not None and is_object_uri(directory):
        paths = object_folder(directory, s3_prefixes, recursive=recursive)
        found = job_store.items_from_paths(paths, images_per_prompt=images_per_prompt)
        if not found:
            raise empty
        return found
    folder = confined(directory or "", roots, must_exist=True, kind="dir")

    def walk() -> Iterator[str]:
        return iter_image_paths(folder, recursive=recursive, roots=roots, videos=videos)

    return ItemStream(
        lambda: job_store.streamed_path_items(walk(), images_per_prompt=images_per_prompt),
        empty=empty,
        listed=lambda: job_store.items_from_paths(list(walk()), images_per_prompt=images_per_prompt),
    )


def image_item(
    settings: Settings, images: list[str], ref: str | None, *, roots: Confinement, s3_prefixes: Sequence[str]
) -> job_store.NewItem:
    """One inline image item (an NDJSON line's) checked and confined as ``image_items`` checks a list's; ``roots``
    made once for the request's lines."""
    check_inline([images], settings, label=lambda _: "the item")
    if not roots.roots and not settings.inputs.tenant_roots_required:
        return job_store.NewItem(inputs={"images": [normalised(i) for i in images]}, ref=ref)
    return job_store.NewItem(inputs={"images": [confined_source(i, roots, s3_prefixes) for i in images]}, ref=ref)


def document_item(path: str, ref: str | None, *, roots: Confinement) -> job_store.NewItem:
    """One inline document item (an NDJSON line's), its path confined as ``document_items`` confines a list's;
    ``roots`` made once for the request's lines."""
    confined_path = roots.checked(path, kind="file")
    return job_store.NewItem(inputs={"path": confined_path}, ref=ref or confined_path)


def object_folder(directory: str, s3_prefixes: Sequence[str], *, recursive: bool) -> list[str]:
    """The images below an ``s3://bucket/prefix`` folder inside ``s3_prefixes`` (the tenant's: bucket names are
    global, the operator's ``VLBATCH_ALLOWED_S3_PREFIXES`` are every tenant's); clips and documents are read from
    local paths only."""
    try:
        return list(iter_objects(directory, allowed=s3_prefixes, suffixes=IMAGE_SUFFIXES, recursive=recursive))
    except InputError as exc:  # outside the prefixes, or the store refused or failed the listing
        raise PathRefused(str(exc.args[0])) from None


def document_items(
    settings: Settings,
    *,
    roots: Sequence[Path],
    inline: Sequence[tuple[str, str | None]] | None,
    directory: str | None,
    recursive: bool,
) -> Sequence[job_store.NewItem] | ItemStream:
    """Document items: ``inline`` (path, ref) pairs, each path confined to ``roots``, or every supported document
    below ``directory``."""
    if inline is not None:
        check_inline([[] for _ in inline], settings)
        paths = [(str(confined(path, roots, kind="file")), ref) for path, ref in inline]
        return [job_store.NewItem(inputs={"path": p}, ref=ref or p) for p, ref in paths]
    folder = confined(directory or "", roots, must_exist=True, kind="dir")

    def items() -> Iterator[job_store.NewItem]:
        for path in iter_file_paths(folder, suffixes=EXTENSIONS, recursive=recursive, roots=roots):
            yield job_store.document_path_items([path])[0]

    empty = JobRefused(NO_INPUTS, f"no documents ({', '.join(sorted(EXTENSIONS))}) under '{directory}'")
    return ItemStream(items, empty=empty)


def output_dir_of(output_dir: str | None, roots: Sequence[Path]) -> str | None:
    """The folder a document job writes its files to, confined to ``roots`` (the tenant's output roots; None: no
    files)."""
    return str(confined(output_dir, roots, kind="dir")) if output_dir else None


def confined_source(source: str, roots: Sequence[Path] | Confinement, s3_prefixes: Sequence[str]) -> str:
    """``source`` normalised (``vlbatch.paths.normalised``), a local path refused (``PathRefused``) unless it lies
    inside ``roots``: the same answer for a file outside them that exists and one that does not, and nothing outside
    them looked at; an ``s3://`` object refused the same way unless it lies inside ``s3_prefixes`` (nothing is fetched:
    the worker confines it again when it reads it). Other URLs and data URLs as given. What counts as local is what
    the dry run reads as local (``vlbatch.paths.is_local``), so the two never disagree."""
    norm = normalised(source)
    if is_object_uri(norm):
        try:
            confine_object(norm, s3_prefixes)
        except InputError as exc:
            raise PathRefused(str(exc.args[0])) from None
    elif is_local(norm):
        rule = roots if isinstance(roots, Confinement) else Confinement(roots)
        rule.checked(source)  # refused as sent, named as sent
    return norm


def chunk_size(settings: Settings, pipeline: str) -> int:
    """Items per chunk of a job of ``pipeline``: the one rule. Documents run a few at a time in a worker
    (``VLBATCH_DOCUMENT_CHUNK_SIZE``), everything else ``VLBATCH_CHUNK_SIZE``; a pipeline no longer registered
    counts as an image one."""
    kind = registry.get(pipeline).kind if pipeline in registry.names() else PipelineKind.IMAGE
    return settings.scheduling.document_chunk_size if kind == PipelineKind.DOCUMENT else settings.scheduling.chunk_size
