"""Runs a job in this process with no broker: the same processor and engine, chunks fed two at a time."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from vlbatch.db import crud
from worker.processor import ProcessorContext, process_chunk


def run_job(ctx: ProcessorContext, job_id: str, *, on_progress: Callable[[int], None] | None = None) -> None:
    with ctx.sessions() as s:
        chunk_ids = crud.chunks_of(s, job_id=job_id)
    # Two chunks in flight: one is prepared while the other decodes, so the engine does not drain.
    with ThreadPoolExecutor(max_workers=ctx.settings.worker_concurrency) as feeders:
        for n in feeders.map(lambda cid: process_chunk(ctx, cid), chunk_ids):
            if on_progress:
                on_progress(n)


def export(sessions: sessionmaker[Session], job_id: str, out: Path) -> int:
    """Write every finished item as JSONL (or CSV when ``out`` ends in .csv); returns the row count."""
    rows = []
    with sessions() as s:
        after = -1
        while page := crud.list_results(s, job_id=job_id, after_seq=after, limit=1000):
            for item, res in page:
                rows.append(
                    {
                        "seq": item.seq,
                        "ref": item.ref,
                        "images": item.inputs.get("images"),
                        "status": item.status,
                        "error_code": item.error_code,
                        "error_message": item.error_message,
                        "tags": (res.output or {}).get("tags") if res else None,
                        "caption": (res.output or {}).get("caption") if res else None,
                        "raw_text": res.raw_text if res else None,
                        "prompt_tokens": res.prompt_tokens if res else 0,
                        "completion_tokens": res.completion_tokens if res else 0,
                        "model": res.model if res else None,
                        "pipeline_version": res.pipeline_version if res else None,
                        "options_hash": res.options_hash if res else None,
                    }
                )
            after = page[-1][0].seq
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".csv":
        with out.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["seq"])
            w.writeheader()
            for r in rows:
                w.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
    else:
        with out.open("w") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return len(rows)
