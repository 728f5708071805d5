"""Prints a ``vlbatch api`` process's resident memory under concurrent dry runs of large PNG data URLs.

Each dry run names one PNG of SIZE x SIZE pixels (64 Mpx by default) as a data URL, its eXIf chunk after its IDAT
(the layout whose EXIF Pillow reaches only by decoding the image). The API reads the header only
(``jobs/headers.py``), so its memory should barely move: the target is under 300 MB while 8 run at once. The API
runs on SQLite in a temporary folder with ``VLBATCH_DRY_RUN_CONCURRENCY`` raised to let every request in.

Usage: python -m benchmarks.dry_run_memory [--size 8000] [--concurrent 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import base64
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import httpx

from benchmarks.api_memory import peak_rss
from benchmarks.hostile_api.__main__ import api_for
from benchmarks.hostile_api.dry_runs import png_exif_after_idat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8000, help="the PNG's side in pixels (8000: 64 Mpx)")
    parser.add_argument("--concurrent", type=int, default=8, help="dry runs sent at once")
    parser.add_argument("--rounds", type=int, default=3, help="times the concurrent dry runs are sent")
    args = parser.parse_args()
    url = "data:image/png;base64," + base64.b64encode(png_exif_after_idat(args.size)).decode()
    area = SimpleNamespace(ENV={"VLBATCH_MODEL_NAME": "tiny", "VLBATCH_DRY_RUN_CONCURRENCY": str(args.concurrent)})
    with tempfile.TemporaryDirectory() as tmp, api_for(area, Path(tmp)) as target:  # type: ignore[arg-type]
        body = {"items": [{"images": [url]}], "dry_run": True}

        def one(_: int) -> httpx.Response:
            return httpx.post(f"{target.base}/v1/jobs/tagging", json=body, headers=target.headers("a"), timeout=120)

        one(0)  # warm: the first request imports what the routes need
        start = time.monotonic()
        with peak_rss(target.pid) as peak, ThreadPoolExecutor(args.concurrent) as pool:
            answers = [r for _ in range(args.rounds) for r in pool.map(one, range(args.concurrent))]
        seconds = time.monotonic() - start
    tokens = {r.json().get("visual_tokens") if r.status_code == 200 else r.status_code for r in answers}
    print(f"PNG data URL: {args.size}x{args.size} ({args.size * args.size / 1e6:.0f} Mpx), {len(url) / 1e6:.2f} MB")
    print(f"dry runs: {len(answers)} ({args.rounds} rounds of {args.concurrent} at once) in {seconds:.1f} s")
    print(f"answers: {sorted(map(str, tokens))} (visual tokens, or the status of a refusal)")
    print(f"API RSS before: {peak.before_mib:.0f} MiB; peak during the dry runs: {peak.peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
