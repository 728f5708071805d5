"""The round protocol: how the feeder runs an item of any kind.

An item is run as rounds of engine requests. Its first step (built in the preprocessing pool) is either a
``Round`` or already its ``Outcome`` (an input that cannot be read). When every request of a round has its
answer, the round's ``then`` turns the answers into the next step: another round, or the item's outcome.
A photo, a clip or a request line is one round whose ``then`` parses the answers (and one more when its
pipeline's ``review`` asks the same again: an answer in the wrong language); a document is ingest and OCR, then
map, then the reduce rounds its pipeline declares (``worker/documents.py``).

A round's ``then`` that only parses (``blocking`` false) runs on the feeder's writer thread, as the answers
are taken in; one that reads files, renders pages or stores parts (``blocking`` true) runs in the
preprocessing pool, where an image's decoding runs.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar, Union

from engine.runtime.requests import GenerationRequest, GenerationResult
from pipelines.base import ImagePipeline, ParseError, Pipeline, RequestPipeline
from vlbatch.db import outcomes
from vlbatch.errors import PARSE_ERROR

log = logging.getLogger(__name__)


@dataclass
class Round:
    """Requests that go to the engine together, and what to do with their answers (in request order)."""

    requests: list[GenerationRequest]
    then: Callable[[list[GenerationResult]], Step]
    blocking: bool = False  # ``then`` touches files or the database: it runs in the preprocessing pool


Step = Union[Round, outcomes.Outcome]  # noqa: UP007 (an alias evaluated at run time)


@dataclass(frozen=True)
class Waiting:
    """An image item's first step when another held item with the same bytes and marker is being answered: its
    outcome will be a copy of that item's (``worker/reuse.py``). It weighs nothing meanwhile."""

    leader: int


_T = TypeVar("_T")
# A multi-round piece of work written as a generator: it yields each round's requests, is sent their answers
# and returns what it makes (an item's output for the whole item).
Rounds = Generator[list[GenerationRequest], list[GenerationResult], _T]


def drive(
    rounds: Rounds[dict[str, Any]],
    *,
    finish: Callable[[dict[str, Any]], outcomes.Outcome],
    fail: Callable[[Exception], outcomes.Outcome],
) -> Step:
    """The first step of a generator of rounds; each round's ``then`` resumes it with the answers. Its
    output goes through ``finish``, an exception it raises through ``fail`` (both run in the pool)."""

    def advance(resume: Callable[[], list[GenerationRequest]]) -> Step:
        try:
            requests = resume()
        except StopIteration as stop:
            return finish(stop.value)
        except Exception as exc:
            return fail(exc)
        return Round(requests, lambda results: advance(lambda: rounds.send(results)), blocking=True)

    return advance(lambda: next(rounds))


def ask(requests: list[GenerationRequest]) -> Rounds[list[GenerationResult]]:
    """Inside a generator of rounds: ``results = yield from ask(requests)``; no round for no requests."""
    if not requests:
        return []
    return (yield requests)


# The item's requests asked again with an instruction added to each prompt (``worker.image_prep.Prepared``).
Again = Callable[[str], list[GenerationRequest]]


def answers_round(
    pipeline: Pipeline,
    opts: Any,
    *,
    item_id: int,
    job_id: str,
    requests: list[GenerationRequest],
    photos: list[dict[str, Any]] | None = None,
    again: Again | None = None,
) -> Round:
    """The one round of an image, video or request item: its answers parsed and merged; an image item's
    output also holds its ``photos``' facts (one per image, in the item's order). ``again``: how to ask the
    item's requests once more with an instruction, when the pipeline's ``review`` asks for it (one more round,
    at most); the review runs in the preprocessing pool (a language detector loads its models on first use)."""
    reviews = isinstance(pipeline, ImagePipeline) and pipeline.reviews(opts)
    return Round(
        requests,
        lambda results: parse_answers(
            pipeline, opts, item_id, job_id, requests, results, photos=photos, again=again if reviews else None
        ),
        blocking=reviews,
    )


def parse_answers(
    pipeline: Pipeline,
    opts: Any,
    item_id: int,
    job_id: str,
    requests: list[GenerationRequest],
    results: list[GenerationResult],
    *,
    photos: list[dict[str, Any]] | None = None,
    again: Again | None = None,
    spent: tuple[int, int] = (0, 0),
) -> Step:
    """The item's outcome from its answers, or, when the pipeline's review asks for it and ``again`` allows,
    the round that asks once more (its outcome then counts both rounds' tokens, ``spent``)."""
    assert isinstance(pipeline, ImagePipeline | RequestPipeline)
    raw: str | None = results[0].text if len(results) == 1 else "\n".join(r.text for r in results)
    if isinstance(pipeline, RequestPipeline):
        # The output holds the answer as it came, JSON-escaped; a raw copy would only double it, and free text
        # may hold NUL characters, which a PostgreSQL text column refuses.
        raw = None
    asked = prompt_hash(requests)  # the round whose answers the outcome is made of
    prompt = spent[0] + sum(r.prompt_tokens for r in results)
    completion = spent[1] + sum(r.completion_tokens for r in results)
    segments = [req.segment for req in requests]
    try:
        outputs = [pipeline.parse(r.text, opts, finish_reason=r.finish_reason) for r in results]
        if isinstance(pipeline, RequestPipeline):
            output = outputs[0]
        elif any(seg is not None for seg in segments):  # a video item: one request per segment of the clip
            output = pipeline.merge_video(outputs, segments, opts)
        else:
            output = pipeline.merge(outputs, opts)
        instruction = None
        if isinstance(pipeline, ImagePipeline) and pipeline.reviews(opts):
            output, instruction = pipeline.review(output, opts, last=again is None)
    except ParseError as exc:
        return outcomes.Outcome(item_id, job_id, None, raw, prompt, completion, exc.code, str(exc), prompt_hash=asked)
    except Exception as exc:  # a pipeline's own bug fails this item; the writer and the job go on
        log.exception("item %d: answers could not be combined", item_id)
        message = repr(exc)[:500]
        return outcomes.Outcome(item_id, job_id, None, raw, prompt, completion, PARSE_ERROR, message, prompt_hash=asked)
    if instruction is not None and again is not None:
        follow = again(instruction)
        return Round(
            follow,
            lambda answers: parse_answers(
                pipeline, opts, item_id, job_id, follow, answers, photos=photos, spent=(prompt, completion)
            ),
            blocking=True,
        )
    if photos:
        output = {**output, "photos": photos}
    return outcomes.Outcome(item_id, job_id, output, raw, prompt, completion, prompt_hash=asked)


@lru_cache(maxsize=256)  # a job's few prompts; a photo's own context makes each prompt new, held for nothing
def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def prompt_hash(requests: list[GenerationRequest]) -> str:
    """What a result keeps of the prompt its answer came from: sha256 (hex) of the prompt text the engine was given
    (the chat template's rendering), or, for an answer of several requests (a clip's segments), sha256 of their
    hashes, one a line, in request order. Cached by text: a job renders the same few prompts over and over."""
    if len(requests) == 1:
        return _sha256(requests[0].prompt)
    return _sha256("\n".join(_sha256(r.prompt) for r in requests))


def failure(item_id: int, job_id: str, code: str, message: str) -> outcomes.Outcome:
    """An item's outcome that is only its error."""
    return outcomes.Outcome(item_id, job_id, None, None, 0, 0, code, message)
