"""``vlbatch run-batch``: an OpenAI/vLLM batch file answered in this process, with no API and no broker.

The input is the format of vLLM's ``run-batch`` (and OpenAI's Batch API): one ``{custom_id, method, url, body}``
per line, from a file or from a URL the settings allow (fetched by the same loader as image URLs). Every line
becomes one item of a request-pipeline job in SQL (SQLite by default), checked as the API checks it, and runs
through the embedded runner: the same feeder and engine as ``vlbatch worker``. The output has one line per
input line, in input order, as vLLM writes it: answered lines with their response, the others with their error.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from engine.runtime.config import EngineConfig
from jobs.estimate import Estimate
from jobs.exports.batch_output import batch_lines
from jobs.request import JobRequest
from jobs.submit import submit
from pipelines import registry
from pipelines.chat import CHAT_ENDPOINT, RequestOptions
from pipelines.openai_batch import LineChecker
from preprocessing.images import load_source
from vlbatch.db import batches, job_store, results
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.errors import INVALID_BATCH, VlbatchError
from vlbatch.settings import Settings
from worker.embedded import run_job
from worker.lent_engine import run_engine
from worker.startup import build_context


class BatchFileRefused(VlbatchError):
    code = INVALID_BATCH


@dataclass(frozen=True)
class BatchRun:
    job_id: str
    lines: int
    answered: int
    failed: int
    out: Path


def _lines(source: str, settings: Settings) -> Iterator[bytes]:
    if source.lower().startswith(("http://", "https://")):
        data = load_source(
            source,
            allowed_roots=[],
            max_bytes=settings.uploads.max_upload_bytes,
            url_timeout_s=settings.fetch.url_timeout_s,
        )
        yield from (line.rstrip(b"\r") for line in data.split(b"\n"))
        return
    with Path(source).open("rb") as fh:
        for line in fh:
            yield line.rstrip(b"\r\n")


def _endpoint(source: str, settings: Settings) -> str:
    """The batch's endpoint: the first line's url (a later line naming another fails as mismatched)."""
    for raw in _lines(source, settings):
        if raw.strip():
            try:
                url = json.loads(raw).get("url")
            except (ValueError, AttributeError):
                continue
            if isinstance(url, str) and url in registry.endpoints():
                return url
    return CHAT_ENDPOINT


def run_batch(
    settings: Settings,
    *,
    source: str,
    out: Path,
    model_dir: Path,
    options: RequestOptions | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> BatchRun:
    """Answer every line of ``source`` with the engine in this process (loaded here, or the one lent to this
    process: ``worker.lent_engine``); one output line per input line."""
    opts = options or RequestOptions()
    if not source.lower().startswith(("http://", "https://")):
        path = Path(source)
        if not path.is_file():
            raise BatchFileRefused(f"{source}: no such batch file")
        roots = settings.inputs.allowed_input_roots or [path.resolve().parent]  # image paths beside the file
        settings = settings.model_copy(update={"allowed_input_roots": roots})
    # The local user's own run, under no tenant: the roots are the global ones whatever tenants must have.
    settings = settings.model_copy(update={"model_path": str(model_dir), "tenant_roots_required": False})
    endpoint = _endpoint(source, settings)
    pipeline = registry.request_pipeline(endpoint)
    name = settings.model.served_model_name or model_dir.name
    migrate(settings.database.database_url)
    sessions = make_sessionmaker(make_engine(settings.database.database_url))
    # The engine here serves one model, whatever the lines name (as vLLM's run-batch does).
    checker = LineChecker(pipeline, opts, endpoint, name, one_model=False)
    lines = (
        batches.LineItem(c.custom_id, {"line": c.line}, c.code, c.message)
        if c.code is not None
        else batches.LineItem(c.custom_id, {"line": c.line, "body": c.body})
        for c in checker.check(_lines(source, settings))
    )
    request = JobRequest(pipeline=pipeline.name, model=name, options=opts.model_dump(), lines=lines)
    with sessions() as s:  # fed below from its chunk list, not the broker; the local user's own job, no quotas
        job = submit(s, settings, request, publish=False, admit=False)
        total = job.total
    if total == 0:
        raise BatchFileRefused(f"{source} holds no request line")
    engine = {"limit_images_per_prompt": opts.images_per_prompt, **settings.runtime.engine}
    config = EngineConfig.model_validate({**engine, "model": str(model_dir)})
    with run_engine(config, ledger=settings.runtime.engine_load_ledger) as (runner, lent):
        ctx = build_context(settings, runner, model_dir=model_dir, model_name=name, loaded=lent)
        if on_start:
            on_start(total)
        if on_progress and checker.invalid:
            on_progress(checker.invalid)  # failed at once: counted as answered
        try:
            run_job(ctx, job.id, on_progress=on_progress)
        finally:
            ctx.pool.shutdown()
    answered = _write(sessions, job.id, endpoint, name, out)
    return BatchRun(job.id, total, answered, total - answered, out)


def estimate_batch(
    settings: Settings,
    *,
    source: str,
    model_dir: Path,
    options: RequestOptions | None = None,
    card: str | None = None,
    cards: int = 1,
) -> Estimate:
    """The dry run of ``run_batch``: its valid lines as the items, estimated (``worker.estimates``); nothing stored
    and no engine loaded. Lines that would fail as they are (a bad line) are not counted."""
    from worker.estimates import estimate_with_model

    opts = options or RequestOptions()
    if not source.lower().startswith(("http://", "https://")):
        path = Path(source)
        if not path.is_file():
            raise BatchFileRefused(f"{source}: no such batch file")
        settings = settings.model_copy(
            update={"allowed_input_roots": settings.inputs.allowed_input_roots or [path.parent]}
        )
    endpoint = _endpoint(source, settings)
    pipeline = registry.request_pipeline(endpoint)
    name = settings.model.served_model_name or model_dir.name
    checker = LineChecker(pipeline, opts, endpoint, name, one_model=False)
    items = [
        job_store.NewItem(inputs={"line": c.line, "body": c.body}, ref=c.custom_id)
        for c in checker.check(_lines(source, settings))
        if c.code is None
    ]
    request = JobRequest(pipeline=pipeline.name, model=name, options=opts.model_dump(), items=items)
    migrate(settings.database.database_url)
    sessions = make_sessionmaker(make_engine(settings.database.database_url))
    with sessions() as s:
        return estimate_with_model(s, settings, request, model_dir=model_dir, card=card, cards=cards)


def _write(sessions: sessionmaker[Session], job_id: str, endpoint: str, model: str, out: Path) -> int:
    """One line per input line, in input order (vLLM's single output file); returns the lines answered."""
    out.parent.mkdir(parents=True, exist_ok=True)
    created = int(time.time())
    answered = 0
    with sessions() as s, out.open("wb") as fh:
        pages = results.iter_results(s, job_id=job_id, every_item=True)
        for ok, line, _ in batch_lines(endpoint, pages, model=model, created=created):
            answered += ok
            fh.write(line)
    return answered
