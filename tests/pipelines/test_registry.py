"""The one registry: every built-in pipeline is complete, and incomplete or unknown ones are errors."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from pipelines import registry
from pipelines.base import DocumentPipeline, ImageBudget, ImagePipeline, PipelineKind, PromptSpec


class _Opts(BaseModel):
    n: int = 1


class _Good(ImagePipeline):
    name = "test_good"
    version = "1"
    Options = _Opts

    def budget(self, opts: Any) -> ImageBudget:
        return ImageBudget(64, 1)

    def requests(self, opts: Any, n_images: int) -> list[PromptSpec]:
        return [PromptSpec("s", "u", 8, (0,))]

    def parse(self, text: str, opts: Any, *, finish_reason: str | None) -> dict[str, Any]:
        return {"text": text}


def test_builtins_are_registered_by_kind() -> None:
    assert registry.names(PipelineKind.IMAGE) == ["image_tagging"]
    assert registry.names(PipelineKind.DOCUMENT) == ["classify", "extract", "summarize"]
    for name in registry.names():
        p = registry.get(name)
        assert p.name == name and p.version and issubclass(p.Options, BaseModel)


def test_unknown_pipeline_names_the_known_ones() -> None:
    with pytest.raises(registry.UnknownPipeline, match="image_tagging"):
        registry.get("no_such")


def test_a_pipeline_missing_a_method_cannot_be_made() -> None:
    class _NoParse(ImagePipeline):
        name = "test_no_parse"
        version = "1"
        Options = _Opts

        def budget(self, opts: Any) -> ImageBudget:
            return ImageBudget(64, 1)

        def requests(self, opts: Any, n_images: int) -> list[PromptSpec]:
            return []

    with pytest.raises(TypeError, match="parse"):
        _NoParse()  # type: ignore[abstract]


def test_a_pipeline_missing_a_declaration_is_refused() -> None:
    class _NoVersion(_Good):
        name = "test_no_version"
        version = ""

    with pytest.raises(registry.PipelineError, match="version"):
        registry.register(_NoVersion())

    class _NoPrefix(DocumentPipeline):
        name = "test_doc"
        version = "1"
        Options = _Opts

        def map_prompt(self, chunk: Any, opts: Any, *, total_pages: int | None) -> str:
            return ""

        def output_schema(self, opts: Any) -> dict[str, Any]:
            return {}

        def max_output_tokens(self, opts: Any) -> int:
            return 1

        def parse(self, text: str, opts: Any, *, finish_reason: str | None) -> dict[str, Any]:
            return {}

    with pytest.raises(registry.PipelineError, match="system_prefix"):
        registry.register(_NoPrefix())
    assert "test_doc" not in registry.names()


def test_a_second_pipeline_of_one_name_is_refused() -> None:
    first = registry.register(_Good())
    try:
        assert registry.get("test_good") is first
        with pytest.raises(registry.PipelineError, match="registered already"):
            registry.register(_Good())
    finally:
        registry.unregister("test_good")


def test_options_are_checked_by_the_pipeline() -> None:
    opts = registry.options_for("image_tagging", {"max_tags": 3})
    assert opts.max_tags == 3
    with pytest.raises(Exception, match="max_tags"):
        registry.options_for("image_tagging", {"max_tags": 0})
    with pytest.raises(registry.PipelineError):
        registry.image_pipeline("summarize")
