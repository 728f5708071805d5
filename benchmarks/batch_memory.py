"""Prints a ``vlbatch api`` process's peak resident memory while it takes a large batch file: the dry run, then the
create, of one ``POST /v1/batches`` each.

The file is MIB MiB of lines of about a MiB each, every line a valid chat request whose body is full of ``[]`` (a
JSON schema's ``examples``): a line's parsed body takes some 24 times its bytes, so an API that held the parsed
lines would need gigabytes; streamed (``jobs/batches.py``, ``vlbatch/db/batches.py::add_items``) the target is under
500 MB at the 200 MiB upload cap. The API runs on SQLite in a temporary folder, its broker Redis db 12.

Usage: python -m benchmarks.batch_memory [--mib 200]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import httpx

from benchmarks.api_memory import peak_rss
from benchmarks.hostile_api.__main__ import api_for

LINE_BYTES = 1_000_000  # under VLBATCH_MAX_BATCH_LINE_BYTES (1 MiB)


def write_file(path: Path, mib: int) -> int:
    """MIB MiB of request lines; how many lines."""
    lines = mib * 1024 * 1024 // (LINE_BYTES + 1)
    with path.open("wb") as fh:
        for n in range(lines):
            body = {
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": {"type": "object"}}},
            }
            line = {"custom_id": str(n), "method": "POST", "url": "/v1/chat/completions", "body": body}
            text = json.dumps(line)
            pad = (LINE_BYTES - len(text) - len(', "examples": []')) // 4
            examples = "[" + ", ".join(["[]"] * pad) + "]"
            text = text.replace('{"type": "object"}', '{"type": "object", "examples": ' + examples + "}")
            fh.write(text.encode() + b"\n")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=200, help="the batch file's size in MiB (the upload cap: 200)")
    args = parser.parse_args()
    area = SimpleNamespace(ENV={"VLBATCH_MODEL_NAME": "tiny"})
    with tempfile.TemporaryDirectory() as tmp, api_for(area, Path(tmp)) as target:  # type: ignore[arg-type]
        path = Path(tmp) / "batch.jsonl"
        lines = write_file(path, args.mib)
        size = path.stat().st_size
        with httpx.Client(base_url=target.base, headers=target.headers("a"), timeout=3600) as client:
            with path.open("rb") as fh:
                up = client.post("/v1/files", data={"purpose": "batch"}, files={"file": ("batch.jsonl", fh)})
            up.raise_for_status()
            path.unlink()
            body = {"input_file_id": up.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
            print(f"batch file: {size / 1024 / 1024:.0f} MiB, {lines} lines of {LINE_BYTES / 1e6:.1f} MB")
            for name, extra in (("dry run", {"dry_run": True}), ("create", {})):
                start = time.monotonic()
                with peak_rss(target.pid) as peak:
                    r = client.post("/v1/batches", json={**body, **extra})
                seconds = time.monotonic() - start
                answer = r.json()
                counted = answer.get("items", answer.get("request_counts", {}).get("total"))
                print(
                    f"{name}: {r.status_code} ({counted} lines) in {seconds:.0f} s; API RSS before "
                    f"{peak.before_mib:.0f} MiB, peak {peak.peak_mib:.0f} MiB"
                )


if __name__ == "__main__":
    main()
