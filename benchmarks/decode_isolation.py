"""Prints what decoding images in decoder child processes costs against the worker's threads.

Writes ``--images`` photo-like JPEGs (``--size``, quality 90), then decodes all of them to a visual-token budget
(``--tokens``, factor 28) through ``worker.image_decode``, ``--threads`` at a time (the worker's preprocessing
threads): in the threads themselves (``VLBATCH_IMAGE_DECODE_ISOLATION=thread``) and through as many decoder
children (``process``). The two modes alternate for ``--rounds`` rounds so load on the machine hits them alike;
the table gives images/s per round and the median. The children are started before the clock starts.

Usage: python benchmarks/decode_isolation.py [--images 64] [--size 1600x1200] [--tokens 256] [--threads 2]
       [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

from preprocessing.documents.sandbox import ParseBounds, Sandbox
from preprocessing.images import budget_pixels
from worker.image_decode import ImageDecoder, IsolatedDecoder, decode_in_thread


def photos(n: int, size: tuple[int, int]) -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    w, h = size
    for _ in range(n):
        ramp = np.linspace(0, 255, w, dtype=np.float32)[None, :, None] * np.ones((h, 1, 3), np.float32)
        noise = rng.normal(0, 24, (h // 8, w // 8, 3)).repeat(8, 0).repeat(8, 1)
        pixels = np.clip(ramp + noise + rng.normal(0, 6, (h, w, 3)), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def rate(decode: ImageDecoder, data: list[bytes], threads: int, budget: dict[str, int]) -> float:
    with ThreadPoolExecutor(threads) as pool:
        started = time.perf_counter()
        list(pool.map(lambda d: decode(d, what="photo", **budget), data))
        return len(data) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--size", default="1600x1200")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    w, h = (int(v) for v in args.size.split("x"))
    data = photos(args.images, (w, h))
    max_px = budget_pixels(args.tokens, patch_size=14, merge_size=2)
    budget = {"factor": 28, "min_pixels": 56 * 56, "max_pixels": max_px}
    sandbox = Sandbox(
        ParseBounds(memory_bytes=1024 * 1024**2, timeout_s=30, tasks_per_child=100_000), processes=args.threads
    )
    isolated = IsolatedDecoder(sandbox)
    try:
        rate(isolated, data[: args.threads * 2], args.threads, budget)  # start the children off the clock
        rows: dict[str, list[float]] = {"thread": [], "process": []}
        for _ in range(args.rounds):
            rows["thread"].append(rate(decode_in_thread, data, args.threads, budget))
            rows["process"].append(rate(isolated, data, args.threads, budget))
    finally:
        sandbox.close()
    print(
        f"{args.images} JPEGs of {w}x{h} to {args.tokens} visual tokens, {args.threads} threads, {args.rounds} rounds"
    )
    print("| decode in | images/s per round | median |")
    print("|---|---|---|")
    for mode, rates in rows.items():
        print(f"| {mode} | {', '.join(f'{r:.1f}' for r in rates)} | {statistics.median(rates):.1f} |")
    print(f"process / thread (medians): {statistics.median(rows['process']) / statistics.median(rows['thread']):.3f}")


if __name__ == "__main__":
    main()
