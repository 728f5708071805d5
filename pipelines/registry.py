"""The document pipelines by name, and their options checked by each pipeline's own model."""

from __future__ import annotations

from types import ModuleType

from pipelines import classify, extract, summarize
from pipelines.documents_common import DocumentOptions

DOCUMENT_PIPELINES: dict[str, ModuleType] = {m.NAME: m for m in (summarize, extract, classify)}


def options_for(pipeline: str, options: dict[str, object]) -> DocumentOptions:
    """Validate a document job's options (raises pydantic's ValidationError, or ValueError for a bad name)."""
    if pipeline not in DOCUMENT_PIPELINES:
        raise ValueError(f"unknown document pipeline '{pipeline}'; one of {sorted(DOCUMENT_PIPELINES)}")
    opts: DocumentOptions = DOCUMENT_PIPELINES[pipeline].Options.model_validate(options)
    return opts
