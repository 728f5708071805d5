"""Every hostile image and document through the real loaders: input x outcome x time x peak RSS.

Images decode in this process (``decode_for_budget``); documents are read by ``load_document`` inside the parser
sandbox's child, whose peak resident memory is the one shown. ``--big`` uses the field report's sizes.

    .venv/bin/python benchmarks/hostile_inputs.py [--big]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.hostile_samples import document_samples, image_samples
from preprocessing.documents import load_document
from preprocessing.documents.child import peak_rss_bytes, reset_peak_rss
from preprocessing.documents.sandbox import ParseBounds, Sandbox
from preprocessing.images import decode_for_budget
from preprocessing.input_errors import InputError

BUDGET = {"factor": 28, "min_pixels": 56 * 56, "max_pixels": 256 * 28 * 28}
MiB = 1024**2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", action="store_true", help="49 MB one-line text, 1e6 nested tags, a 2 GB flate stream")
    args = parser.parse_args()
    rows: list[tuple[str, str, str, float, int]] = []
    for sample in image_samples():
        data = sample.data()
        reset_peak_rss()
        started = time.monotonic()
        try:
            decode_for_budget(data, **BUDGET)
            outcome = "ok"
        except InputError as exc:
            outcome = exc.code
        rows.append(("image", sample.name, outcome, time.monotonic() - started, peak_rss_bytes()))
    box = Sandbox(ParseBounds(timeout_s=120.0))
    with tempfile.TemporaryDirectory() as tmp:
        for sample in document_samples(big=args.big):
            path = Path(tmp) / f"doc{sample.suffix}"
            path.write_bytes(sample.data())
            started = time.monotonic()
            try:
                _, usage = box.call_measured(load_document, path, what=path.name)
                outcome, peak = "ok", usage.peak_rss_bytes
            except InputError as exc:
                outcome, peak = exc.code, getattr(getattr(exc, "usage", None), "peak_rss_bytes", 0)
            rows.append(("document", sample.name, outcome, time.monotonic() - started, peak))
    box.close()
    print("| kind | input | outcome | seconds | peak RSS MiB |\n| --- | --- | --- | ---: | ---: |")
    for kind, name, outcome, seconds, peak in rows:
        print(f"| {kind} | {name} | {outcome} | {seconds:.2f} | {peak / MiB:.0f} |")


if __name__ == "__main__":
    main()
