"""The pipeline protocol: what every registered pipeline declares, and nothing about how it is run.

A pipeline names itself (``name``, ``version``, ``kind``), owns its typed ``Options``, says how an item
becomes engine requests, how an answer is parsed and how the answers of one item merge. The worker's
feeder runs every item as rounds of engine requests: an image or a request item is one round; a document
is ingest and OCR, map, then the rounds its pipeline's ``combine`` asks for (none for a pure merge).
Registering is ``pipelines.registry.register``.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel

from pipelines.documents_common import ParseError, PassageResult
from preprocessing.chunking import Passage
from preprocessing.photo_context import BEYOND_BYTES

__all__ = [
    "Ask",
    "Combine",
    "DocumentPipeline",
    "ImageBudget",
    "ImagePipeline",
    "ParseError",
    "Pipeline",
    "PipelineKind",
    "PromptSpec",
    "RequestPipeline",
    "RequestSpec",
]


class PipelineKind(enum.StrEnum):
    IMAGE = "image"  # an item is 1..N images; one or more requests per item
    DOCUMENT = "document"  # an item is a file; chunked, mapped, reduced or merged
    REQUEST = "request"  # an item is one request body (OpenAI chat or completions); its images are in it


@dataclass(frozen=True)
class PromptSpec:
    """One engine request as a pipeline asks for it, before the model's chat template is applied.

    ``images`` are indices into the item's prepared images, so one item may ask several questions of
    the same pictures without decoding them twice.
    """

    system: str
    user: str
    max_tokens: int
    images: tuple[int, ...] = ()
    json_schema: dict[str, Any] | None = None
    segment: Segment | None = None  # the part of a video the images come from (a video item's requests)


@dataclass(frozen=True)
class ImageBudget:
    """How an item's images are sized: tokens per image, and how many images one prompt may hold."""

    max_visual_tokens: int
    images_per_prompt: int


@dataclass(frozen=True)
class RequestSpec:
    """The one engine request of a request body: chat ``messages`` (rendered by the model's chat template,
    ``{"type": "image"}`` parts in the order of the item's images) or a raw ``prompt``, with its sampling."""

    max_tokens: int
    messages: tuple[dict[str, Any], ...] | None = None
    prompt: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    json_schema: dict[str, Any] | None = None


@dataclass(frozen=True)
class Segment:
    """A stretch of a video: its frames' times, from ``start_s`` until ``end_s``."""

    start_s: float
    end_s: float
    frame_times: tuple[float, ...]


@dataclass(frozen=True)
class VideoBudget:
    """How a video item's frames are chosen and sized: ``max_visual_tokens`` covers every frame of the clip."""

    max_frames: int
    fps: float
    selection: str  # preprocessing.video.FrameSelection
    scene_threshold: float
    max_visual_tokens: int
    frames_per_prompt: int
    video_input: str = "auto"  # VideoInput: the model's video input, images, or video where the model has one


class Pipeline(ABC):
    """Common declaration. Subclasses set the class attributes; ``registry.register`` checks them."""

    name: ClassVar[str]
    version: ClassVar[str]
    kind: ClassVar[PipelineKind]
    Options: ClassVar[type[BaseModel]]
    # The answer's keys that the flat exports (CSV, Parquet) give columns of their own, after the columns every
    # job has; the answer stays whole in ``output`` too. Declared on the class: a file's columns are known before
    # its first row.
    flat_columns: ClassVar[tuple[str, ...]] = ()

    def options(self, raw: dict[str, Any]) -> BaseModel:
        """Validate a job's options (pydantic's ValidationError names the bad field)."""
        return self.Options.model_validate(raw)

    def flat_values(self, output: Any) -> dict[str, Any]:
        """The ``flat_columns`` of one answer (None where it has no such key, or no answer at all)."""
        return {name: output.get(name) if isinstance(output, dict) else None for name in self.flat_columns}


class _ReadsImages(Pipeline):
    """A pipeline whose items name images the feeder reads (image items, request bodies with image parts)."""

    def reuses(self, opts: Any) -> bool:
        """Whether an item whose bytes were answered before (same marker, same tenant) takes that answer instead
        of asking the engine: the job option ``reuse`` where the pipeline has one, else yes; but never when the
        prompt tells facts the bytes do not hold (``preprocessing.photo_context.BEYOND_BYTES``: a copy in another
        album, under another name or with other keywords would be told another context)."""
        if set(getattr(opts, "context", None) or ()) & BEYOND_BYTES:
            return False
        return bool(getattr(opts, "reuse", True))

    @abstractmethod
    def budget(self, opts: Any) -> ImageBudget:
        """The visual-token budget per image and the images-per-prompt limit for these options."""


class ImagePipeline(_ReadsImages):
    """An item is a list of image sources; the feeder loads and sizes them, then asks ``requests``."""

    kind = PipelineKind.IMAGE

    @abstractmethod
    def requests(self, opts: Any, n_images: int, context: str = "") -> list[PromptSpec]:
        """The engine requests one item of ``n_images`` prepared images becomes (at least one). ``context``: the
        photo's facts as a block of text for the prompt (``preprocessing.photo_context``), passed only when
        ``context_facts`` names some and the photo has one of them (so a pipeline without the option may leave the
        parameter out)."""

    def photo_gps(self, opts: Any) -> bool:
        """Whether the photos' GPS positions go into the results: only when the options ask (``photo_gps``)."""
        return bool(getattr(opts, "photo_gps", False))

    def context_facts(self, opts: Any) -> tuple[str, ...]:
        """The photo facts (``preprocessing.photo_context.PROVIDERS``' names) its prompt tells the model: the
        option ``context`` where the pipeline has one, else none."""
        return tuple(getattr(opts, "context", None) or ())

    def reviews(self, opts: Any) -> bool:
        """Whether ``review`` checks the answers of a job with these options (none by default)."""
        return False

    def review(self, output: dict[str, Any], opts: Any, *, last: bool) -> tuple[dict[str, Any], str | None]:
        """An item's merged answer checked: the output to keep, and an instruction to ask the same requests once
        more with (added to each prompt), or None when the answer stands. ``last``: no more rounds will be asked;
        the output then says what is still wrong (its ``warnings``)."""
        return output, None

    @abstractmethod
    def parse(self, text: str, opts: Any, *, finish_reason: str | None) -> dict[str, Any]:
        """One answer as the result's output; raises ``ParseError`` (``parse_error``/``output_truncated``)."""

    def merge(self, outputs: Sequence[dict[str, Any]], opts: Any) -> dict[str, Any]:
        """The item's output from the parsed answers of its requests, in request order."""
        if len(outputs) != 1:
            raise NotImplementedError(f"{self.name} asks {len(outputs)} requests per item but does not merge them")
        return outputs[0]

    # A pipeline that tags videos too overrides the three below; a video item in any other fails as
    # ``video_not_supported``.
    takes_video: ClassVar[bool] = False

    def video_budget(self, opts: Any) -> VideoBudget:
        raise NotImplementedError(f"{self.name} takes no video")

    def video_requests(self, opts: Any, segments: Sequence[Segment]) -> list[PromptSpec]:
        """The engine requests of a video item whose chosen frames fall into ``segments`` (in time order)."""
        raise NotImplementedError(f"{self.name} takes no video")

    def merge_video(self, outputs: Sequence[dict[str, Any]], segments: Sequence[Segment], opts: Any) -> dict[str, Any]:
        """A video item's output from the parsed answers of its requests, each with the segment it saw."""
        raise NotImplementedError(f"{self.name} takes no video")


@dataclass(frozen=True, slots=True)
class Ask:
    """One engine request a document pipeline's ``combine`` asks for. Its parsed answer is stored as the
    document part (``stage``, ``idx``) with ``pages``, so a redelivered document does not ask again."""

    stage: str
    idx: int
    pages: tuple[int, ...]
    system: str
    user: str
    schema: dict[str, Any] | None
    max_tokens: int


# Yields each round's asks, is sent their parsed answers (in the same order), returns the document's answer.
Combine = Generator[list[Ask], list[dict[str, Any]], dict[str, Any]]


class DocumentPipeline(Pipeline):
    """An item is a document; each chunk is mapped with ``map_prompt``, then ``combine`` makes the answers
    one: by ``merge`` (pure, no engine round), or by rounds of its own (``summarize`` reduces level by level)."""

    kind = PipelineKind.DOCUMENT
    system_prefix: ClassVar[str]
    # The integer option that bounds every answer's length (``max_output_tokens`` grows with it): the one to lower
    # when a small context leaves no room for document text. None: no single option does (a schema's size, labels).
    output_bound: ClassVar[str | None] = None

    @abstractmethod
    def map_prompt(self, chunk: Passage, opts: Any, *, total_pages: int | None) -> str:
        """The user prompt for one chunk."""

    @abstractmethod
    def output_schema(self, opts: Any) -> dict[str, Any]:
        """The JSON schema each chunk's answer must follow."""

    @abstractmethod
    def max_output_tokens(self, opts: Any) -> int:
        """A true upper bound of one answer's tokens (from the schema's bounds)."""

    @abstractmethod
    def parse(self, text: str, opts: Any, *, finish_reason: str | None) -> dict[str, Any]:
        """One chunk's answer (or one ``Ask``'s); raises ``ParseError``."""

    def select_chunks(self, chunks: Sequence[Passage], opts: Any) -> list[Passage]:
        """The chunks worth asking about (all of them, unless the pipeline needs fewer)."""
        return list(chunks)

    def merge(self, results: Sequence[PassageResult], opts: Any) -> dict[str, Any]:
        """The document's answer from its chunks' answers, for pipelines whose ``combine`` is a pure merge."""
        raise NotImplementedError(f"{self.name} combines its answers with the engine; it has no pure merge")

    def combine(
        self,
        results: Sequence[PassageResult],
        opts: Any,
        count_tokens: Callable[[str], int],
        *,
        max_model_len: int,
        stored: Mapping[tuple[str, int], dict[str, Any]],
    ) -> Combine:
        """The document's answer from its chunks' answers, asking the engine in rounds where the pipeline
        needs to. ``stored`` holds the parsed answers of asks an earlier attempt made; they are not asked
        again. By default a pure ``merge``, with no round."""
        yield from ()
        return self.merge(results, opts)


class RequestPipeline(_ReadsImages):
    """An item is one request body (``inputs["body"]``); the feeder loads the images it names (``sources``)
    within ``budget`` and sends the one ``request`` it becomes. The answer is the completion as it came."""

    kind = PipelineKind.REQUEST
    endpoint: ClassVar[str]  # the OpenAI route a batch line names, e.g. /v1/chat/completions
    Body: ClassVar[type[BaseModel]]  # the request body, strict: an unknown field is refused

    @abstractmethod
    def sources(self, body: dict[str, Any]) -> list[str]:
        """The image sources of a body, in the order its prompt shows them (none for text)."""

    @abstractmethod
    def request(self, body: dict[str, Any], opts: Any) -> RequestSpec:
        """The engine request a (validated) body becomes."""

    @abstractmethod
    def parse(self, text: str, opts: Any, *, finish_reason: str | None) -> dict[str, Any]:
        """The answer as the result's output (what an OpenAI response body is built from)."""
