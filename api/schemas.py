"""Request and response models (kept apart from the table models)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    create_model,
    model_validator,
)

from api.text_check import text_fault
from pipelines.image_tagging import TaggingOptions
from vlbatch.db.result_fields import EXPORTED_FIELDS, ITEM_FIELDS, ResultField
from vlbatch.settings import QueueKind
from vlbatch.text import wide_object

MAX_OBJECT_KEYS = 1000  # keys of any one object in a request body (options, an item, a schema)
MAX_REF_CHARS = 512  # an item's ``ref``
MAX_DOCUMENT_PATH_CHARS = 1024  # a document item's ``path``
# How far ahead a deadline may be. Further ahead ranks no differently; and the bound keeps out the times the
# database stores but its driver cannot read back (year 1 at +14:00 is 1 BC in UTC, 9999 at -14:00 is 10000 AD).
MAX_DEADLINE_AHEAD = timedelta(days=366)


def _deadline_in_range(at: datetime) -> datetime:
    """A deadline already over is refused, not clamped: it would say the job is late before it starts, and the
    caller learns at once that its clock or its arithmetic is off."""
    now = datetime.now(UTC)
    if at <= now:
        raise ValueError("the deadline is already over: give a time in the future, with its zone")
    if at - now > MAX_DEADLINE_AHEAD:
        raise ValueError(f"the deadline is more than {MAX_DEADLINE_AHEAD.days} days ahead")
    return at


Deadline = Annotated[AwareDatetime, AfterValidator(_deadline_in_range)]
_DEADLINE_DOC = (
    f"ISO time with a zone, in the future and at most {MAX_DEADLINE_AHEAD.days} days ahead: within the tenant's"
    " fair share of the queue, the job's claims go earliest deadline first."
)


class Strict(BaseModel):
    """A request model: unknown fields refused, no object in it with more than ``MAX_OBJECT_KEYS`` keys, and no
    string anywhere in it (options and items too) holding NUL or a lone surrogate, which the database, the file
    system and the JSON answer cannot take."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _clean_text(cls, data: Any) -> Any:
        if (fault := wide_object(data, MAX_OBJECT_KEYS) or text_fault(data)) is not None:
            raise ValueError(fault)
        return data


class ItemIn(Strict):
    images: list[str] = Field(min_length=1, description="Paths, http(s) URLs or data URLs.")
    ref: str | None = Field(None, max_length=MAX_REF_CHARS, description="Caller's own id for the item.")


class TaggingJobCreate(Strict):
    model: str | None = Field(None, max_length=256, description="Served model name; the default model when omitted.")
    priority: Literal["interactive", "batch"] = "batch"
    items: list[ItemIn] | None = None
    directory: str | None = Field(None, max_length=4096, description="Server-side folder inside an allowed root.")
    recursive: bool = True
    options: TaggingOptions = Field(default_factory=TaggingOptions)
    deadline: Deadline | None = Field(None, description=_DEADLINE_DOC)
    strict_deadline: bool = Field(False, description="Refuse the job (422) when its estimate misses the deadline.")
    dry_run: bool = Field(False, description="Store nothing: answer the estimate (items, tokens, time, Wh, cost).")

    @model_validator(mode="after")
    def _one_source(self) -> TaggingJobCreate:
        if (self.items is None) == (self.directory is None):
            raise ValueError("give exactly one of 'items' or 'directory'")
        if self.items is not None and not self.items:
            raise ValueError("'items' is empty: a job needs at least one item")
        return self


class DocumentIn(Strict):
    path: str = Field(
        min_length=1, max_length=MAX_DOCUMENT_PATH_CHARS, description="Server-side file inside an allowed root."
    )
    ref: str | None = Field(None, max_length=MAX_REF_CHARS, description="Caller's own id for the document.")


class DocumentJobCreate(Strict):
    """A summarize, extract or classify job; ``options`` are checked by that pipeline (422 when bad)."""

    pipeline: str = Field(
        max_length=128, description="A document pipeline of the registry (summarize, extract, classify, ...)."
    )
    model: str | None = Field(None, max_length=256, description="Served model name; the default model when omitted.")
    items: list[DocumentIn] | None = None
    directory: str | None = Field(None, max_length=4096, description="Server-side folder inside an allowed root.")
    recursive: bool = True
    options: dict[str, Any] = Field(default_factory=dict)
    output_dir: str | None = Field(
        None, max_length=4096, description="Also write a JSON file per document here (inside a root)."
    )
    deadline: Deadline | None = Field(None, description=_DEADLINE_DOC)
    strict_deadline: bool = Field(False, description="Refuse the job (422) when its estimate misses the deadline.")
    dry_run: bool = Field(False, description="Store nothing: answer the estimate (items, tokens, time, Wh, cost).")

    @model_validator(mode="after")
    def _one_source(self) -> DocumentJobCreate:
        if (self.items is None) == (self.directory is None):
            raise ValueError("give exactly one of 'items' or 'directory'")
        if self.items is not None and not self.items:
            raise ValueError("'items' is empty: a job needs at least one document")
        return self


class JobCreate(Strict):
    """A job of any registered pipeline; ``items`` take the shape of the pipeline's kind: image pipelines
    ``{"images": [...], "ref": ...}``, document pipelines ``{"path": ..., "ref": ...}``."""

    pipeline: str = Field(max_length=128, description="A pipeline name from GET /v1/pipelines.")
    model: str | None = Field(None, max_length=256, description="Served model name; the default model when omitted.")
    priority: QueueKind | None = Field(None, description="Queue; 'documents' for document pipelines by default.")
    items: list[dict[str, Any]] | None = None
    directory: str | None = Field(None, max_length=4096, description="Server-side folder inside an allowed root.")
    recursive: bool = True
    options: dict[str, Any] = Field(default_factory=dict, description="Checked by the pipeline's own options.")
    output_dir: str | None = Field(
        None, max_length=4096, description="Document pipelines: also write a JSON file per document here."
    )
    deadline: Deadline | None = Field(None, description=_DEADLINE_DOC)
    strict_deadline: bool = Field(False, description="Refuse the job (422) when its estimate misses the deadline.")
    dry_run: bool = Field(False, description="Store nothing: answer the estimate (items, tokens, time, Wh, cost).")

    @model_validator(mode="after")
    def _one_source(self) -> JobCreate:
        if (self.items is None) == (self.directory is None):
            raise ValueError("give exactly one of 'items' or 'directory'")
        if self.items is not None and not self.items:
            raise ValueError("'items' is empty: a job needs at least one item")
        return self


class NdjsonJobHead(Strict):
    """The first line of an NDJSON job upload (``POST /v1/jobs/ndjson``): ``JobCreate`` without its items (the lines
    after this one) and without ``directory`` and ``dry_run``."""

    pipeline: str = Field(max_length=128, description="A pipeline name from GET /v1/pipelines.")
    model: str | None = Field(None, max_length=256, description="Served model name; the default model when omitted.")
    priority: QueueKind | None = Field(None, description="Queue; 'documents' for document pipelines by default.")
    options: dict[str, Any] = Field(default_factory=dict, description="Checked by the pipeline's own options.")
    output_dir: str | None = Field(
        None, max_length=4096, description="Document pipelines: also write a JSON file per document here."
    )
    deadline: Deadline | None = Field(None, description=_DEADLINE_DOC)
    strict_deadline: bool = Field(False, description="Refuse the job (422) when its estimate misses the deadline.")


class PipelineOut(BaseModel):
    name: str
    version: str
    kind: str
    options_schema: dict[str, Any]


class ErrorCodeOut(BaseModel):
    """One error code as ``GET /v1/errors`` lists it; the ``code`` an error body or a failed item carries."""

    code: str
    meaning: str
    retryable: bool = Field(description="The same request or item, unchanged, may succeed later.")
    http_status: int = Field(description="The status of an API answer with this code.")
    used_in: list[Literal["item", "api", "worker", "cli"]] = Field(
        description="Where the code shows: a failed item, an API error body, the worker's log, the CLI."
    )


class RerunRequest(Strict):
    scope: Literal["missing", "all", "refresh"] = Field(
        "missing",
        description="'missing': only items that did not succeed; 'all': every item again; 'refresh': items whose"
        " result was made with another model, pipeline version or options (or model_revision, when given).",
    )
    model_revision: str | None = Field(
        None, max_length=128, description="With 'refresh': also re-run results made with another model revision."
    )


class JobEnergyOut(BaseModel):
    """Energy the engine workers booked to the job; ``None`` is unknown (no chip power figure), never zero."""

    wh: float | None
    wh_per_1000_items: float | None
    cost: float | None = Field(None, description="wh / 1000 x VLBATCH_PRICE_PER_KWH, when that is set.")
    unmetered_tokens: int = Field(0, description="Tokens worked in intervals whose power was unknown.")


class JobOut(BaseModel):
    id: str
    pipeline: str
    model: str
    priority: str
    status: str
    total: int
    counts: dict[str, int]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    items_per_second: float | None
    eta_seconds: float | None
    energy: JobEnergyOut | None = None
    queue_paused: bool = Field(False, description="The job's queue (model and priority) is paused: nothing is claimed.")
    deadline: datetime | None = Field(None, description="When the job should be finished; claims go earliest first.")
    deadline_status: Literal["on_track", "at_risk", "late"] | None = Field(
        None, description="From the queue's live rate and the items ahead of the job's last one; None: no deadline."
    )
    expected_finish_at: datetime | None = Field(None, description="When the items ahead are done at the live rate.")
    expires_at: datetime | None = Field(
        None,
        description="When the job is deleted with its items and results (docs/retention.md): its end plus its "
        "tenant's retention, or its batch's output expiry. None while it runs, or when it is kept for ever.",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="What the status alone does not say: while the job waits, that no live worker serves its model"
        " (naming the models live workers serve); once finished, that every item failed; on a create's answer also"
        " a deadline it may miss.",
    )

    stalled: str | None = Field(
        None,
        description="Why the job does not move, when every worker serving its model has a broken engine (its breaker"
        " is open): 'the engine of worker W crashes on ... since T'. None while it moves or has ended.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="The options that shaped every answer of the job, as given (those that only say how it runs, as"
        " reuse, left out); each result's options_hash is their hash with the pipeline's name.",
    )
    options_hash: str | None = Field(None, description="The hash of the pipeline's name and these options.")


class FigureOut(BaseModel):
    value: float | None = Field(description="None: unknown, and the assumption says why.")
    assumption: str


class ItemTokensOut(BaseModel):
    ref: str | None
    visual_tokens: int | None = Field(description="None: not known without fetching or decoding it.")
    text_tokens: int
    output_tokens: int = Field(description="The answer's budget (max_tokens).")


class EstimateOut(BaseModel):
    """A dry run: what the job would run, estimated; nothing is stored."""

    dry_run: Literal[True] = True
    items: int
    per_item: list[ItemTokensOut] = Field(description="The first 1,000 items; the totals cover every one.")
    visual_tokens: int
    text_tokens: int
    tokens: str = Field(description="How the token counts were made.")
    engine_seconds: FigureOut
    wh: FigureOut
    cost: FigureOut
    expected_finish_at: datetime | None
    warnings: list[str]


class ItemOut(BaseModel):
    id: int
    seq: int
    ref: str | None
    status: str
    inputs: dict[str, Any]
    error_code: str | None
    error_message: str | None


class TagOut(BaseModel):
    """One of an item's tags: given by the model, or added by hand (``by`` the key, ``at`` when)."""

    tag: str
    source: Literal["model", "manual"]
    by: str | None = None
    at: str | None = None


# The API's type of a declared field where its stored type does not say it (the JSON ones); every other field's
# type follows its column: ``integer`` an int (0 without a result when its ``empty`` is 0), ``text`` a string.
_RESULT_TYPES: dict[str, Any] = {
    "item_id": (int, ...),
    "seq": (int, ...),
    "ref": (str | None, ...),
    "status": (str, ...),
    "error_code": (str | None, None),
    "error_message": (str | None, None),
    "output": (dict[str, Any] | None, None),
    "tags": (list[TagOut] | None, None),
}
_COLUMN_TYPES: dict[str, Any] = {"integer": int, "text": str, "json": Any}


def _result_field(f: ResultField) -> tuple[Any, Any]:
    annotation, default = _RESULT_TYPES.get(f.name) or (
        (int, f.empty) if f.empty is not None else (_COLUMN_TYPES[f.sql] | None, None)
    )
    return annotation, Field(default, description=f.doc) if f.doc else default


if TYPE_CHECKING:
    ResultOut = BaseModel
else:
    # An item and its result as the API answers it: ``EXPORTED`` (``vlbatch.db.result_fields``), in that order.
    ResultOut = create_model(
        "ResultOut",
        __module__=__name__,
        **{name: _RESULT_TYPES[name] for name in ITEM_FIELDS},
        **{f.name: _result_field(f) for f in EXPORTED_FIELDS},
    )


class QueueRef(Strict):
    """A queue: the model its jobs name and their priority (``vlbatch.<model>.<priority>`` on the broker)."""

    model: str = Field(min_length=1, max_length=256)
    priority: QueueKind


class QueueOut(BaseModel):
    name: str
    model: str
    priority: str
    paused: bool
    paused_by: str | None = None
    paused_at: datetime | None = None
    active_jobs: int = Field(description="Queued, running or paused jobs on the queue.")


TagName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class TagEditRequest(Strict):
    add: list[TagName] = Field(default_factory=list, max_length=100, description="Tags to add by hand.")
    remove: list[TagName] = Field(
        default_factory=list, max_length=100, description="Tags to remove (a model's tag stays removed on re-runs)."
    )


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    data: list[T]
    next_cursor: str | None


class ResultsPage(BaseModel):
    """Finished items in the order their results were written, so a job read while it runs misses none."""

    data: list[ResultOut]
    next_cursor: str | None = Field(
        description="Pass as ``cursor`` for the next page; null once this page reaches the last result written so "
        "far (a loop until null ends, also while the job runs)."
    )
    resume_cursor: str = Field(
        description="Where this page ends: pass it as ``cursor`` later to get only the results written since."
    )
