"""Quantize the generated tiny Qwen2-VL to W8A8 and print the size and per-layer error table.

    .venv/bin/python benchmarks/quantize_tiny.py [--smooth-alpha 0.5] [--keep DIR]

Writes into a temporary directory (or DIR) and prints what ``vlbatch quantize`` prints.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from engine.tiny_model import write_tiny_qwen2_vl
from kernels.quantize import QuantizeOptions, quantize_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smooth-alpha", type=float, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="write the model and checkpoints here and keep them")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        src = write_tiny_qwen2_vl(root / "tiny-qwen2-vl")
        report = quantize_model(
            src, root / "w8a8", cpu_out=root / "w8a8-cpu", options=QuantizeOptions(smooth_alpha=args.smooth_alpha)
        )
        print(report.format())


if __name__ == "__main__":
    main()
