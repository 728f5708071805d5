"""The one registry of pipelines, read by the API, job templates, the CLI and the worker.

Adding a pipeline is one module with a ``Pipeline`` subclass plus one line in ``BUILTIN`` (or one
``register()`` call). A pipeline that is not completely declared fails here, at import or at
``register()``, never later as a silent fallback; an unknown name is an ``UnknownPipeline`` error.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from pipelines import chat, classify, extract, image_tagging, summarize
from pipelines.base import DocumentPipeline, ImagePipeline, Pipeline, PipelineKind, RequestPipeline
from vlbatch.errors import INVALID_PIPELINE, UNKNOWN_PIPELINE, VlbatchError


class PipelineError(VlbatchError):
    """A pipeline is declared incompletely, twice, or asked for by a name nobody registered."""

    code = INVALID_PIPELINE


class UnknownPipeline(PipelineError):
    code = UNKNOWN_PIPELINE


_PIPELINES: dict[str, Pipeline] = {}
_REQUIRED: dict[PipelineKind, tuple[str, ...]] = {
    PipelineKind.IMAGE: (),
    PipelineKind.DOCUMENT: ("system_prefix",),
    PipelineKind.REQUEST: ("endpoint", "Body"),
}


def register(pipeline: Pipeline) -> Pipeline:
    """Add ``pipeline``; raises ``PipelineError`` naming what is missing or already taken."""
    missing = [a for a in ("name", "version", "kind", "Options") if not getattr(pipeline, a, None)]
    if missing:
        raise PipelineError(f"{type(pipeline).__name__} does not declare {', '.join(missing)}")
    expected: type[Pipeline] = {
        PipelineKind.IMAGE: ImagePipeline,
        PipelineKind.DOCUMENT: DocumentPipeline,
        PipelineKind.REQUEST: RequestPipeline,
    }[pipeline.kind]
    if not isinstance(pipeline, expected):
        raise PipelineError(f"pipeline '{pipeline.name}' has kind {pipeline.kind} but is not an {expected.__name__}")
    missing = [a for a in _REQUIRED[pipeline.kind] if not getattr(pipeline, a, None)]
    if missing:
        raise PipelineError(f"pipeline '{pipeline.name}' does not declare {', '.join(missing)}")
    if not (isinstance(pipeline.Options, type) and issubclass(pipeline.Options, BaseModel)):
        raise PipelineError(f"pipeline '{pipeline.name}': Options must be a pydantic model class")
    old = _PIPELINES.get(pipeline.name)
    if old is not None and old is not pipeline:
        raise PipelineError(f"pipeline '{pipeline.name}' is registered already ({type(old).__name__})")
    _PIPELINES[pipeline.name] = pipeline
    return pipeline


def unregister(name: str) -> None:
    """Remove a pipeline (tests that register their own)."""
    _PIPELINES.pop(name, None)


def get(name: str) -> Pipeline:
    try:
        return _PIPELINES[name]
    except KeyError:
        raise UnknownPipeline(f"unknown pipeline '{name}'; one of {', '.join(sorted(_PIPELINES))}") from None


def names(kind: PipelineKind | None = None) -> list[str]:
    return sorted(n for n, p in _PIPELINES.items() if kind is None or p.kind == kind)


def options_for(name: str, options: dict[str, Any]) -> Any:
    """A job's options checked by its pipeline (pydantic's ValidationError, or UnknownPipeline)."""
    return get(name).options(options)


def image_pipeline(name: str) -> ImagePipeline:
    p = get(name)
    if not isinstance(p, ImagePipeline):
        raise PipelineError(f"pipeline '{name}' is a {p.kind} pipeline, not an image pipeline")
    return p


def document_pipeline(name: str) -> DocumentPipeline:
    p = get(name)
    if not isinstance(p, DocumentPipeline):
        raise PipelineError(f"pipeline '{name}' is a {p.kind} pipeline, not a document pipeline")
    return p


def request_pipeline(endpoint: str) -> RequestPipeline:
    """The request pipeline serving an OpenAI route (``/v1/chat/completions``, ``/v1/completions``)."""
    for p in _PIPELINES.values():
        if isinstance(p, RequestPipeline) and p.endpoint == endpoint:
            return p
    raise UnknownPipeline(f"no pipeline serves '{endpoint}'; one of {', '.join(sorted(endpoints()))}")


def endpoints() -> list[str]:
    return sorted(p.endpoint for p in _PIPELINES.values() if isinstance(p, RequestPipeline))


BUILTIN: tuple[Pipeline, ...] = (
    image_tagging.PIPELINE,
    chat.CHAT,
    chat.COMPLETIONS,
    summarize.PIPELINE,
    extract.PIPELINE,
    classify.PIPELINE,
)
for _p in BUILTIN:
    register(_p)
