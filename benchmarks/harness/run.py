"""Runs a benchmark: the inputs once, then each arm in a fresh subprocess, one engine at a time.

An arm function that can be imported by name (``module:qualname``) runs in ``python -m
benchmarks.harness.run``, which writes its ``ArmResult`` as JSON and exits, so every engine, server and
thread it started is gone before the next arm loads its own (a 2-core, 24 GiB host cannot hold two
engines comfortably). Any other callable (a test's lambda) runs in this process. An arm that raises,
or whose process dies, becomes a result with ``error`` set; the other arms still run.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from benchmarks.harness.inputs import BenchInputs, prepare_inputs
from benchmarks.harness.result import ArmFn, ArmResult
from benchmarks.harness.spec import BenchSpec

log = logging.getLogger(__name__)


def reference(fn: Callable[..., Any]) -> str | None:
    """``module:qualname`` when ``fn`` can be imported back by that name, else None."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        return None
    try:
        return f"{module}:{qualname}" if _resolve(f"{module}:{qualname}") is fn else None
    except (ImportError, AttributeError):
        return None


def _resolve(ref: str) -> Any:
    module, _, qualname = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _run_child(ref: str, name: str, spec: BenchSpec, model_dir: Path, photos: list[Path]) -> ArmResult:
    with tempfile.TemporaryDirectory(prefix="vlbatch-bench-") as tmp:
        request = Path(tmp) / "request.json"
        out = Path(tmp) / "result.json"
        request.write_text(
            json.dumps(
                {
                    "arm": ref,
                    "name": name,
                    "spec": spec.model_dump(mode="json"),
                    "model_dir": str(model_dir),
                    "photos": [str(p) for p in photos],
                    "out": str(out),
                }
            )
        )
        proc = subprocess.run([sys.executable, "-m", "benchmarks.harness.run", "--child", str(request)], check=False)
        if out.is_file():
            return ArmResult.from_dict(json.loads(out.read_text()))
        return ArmResult.failure(name, f"arm process exited with {proc.returncode}", max_num_seqs=spec.max_num_seqs)


def _run_here(fn: ArmFn, name: str, spec: BenchSpec, model_dir: Path, photos: list[Path]) -> ArmResult:
    try:
        return fn(spec, model_dir, photos)
    except Exception as exc:
        log.error("arm %s failed:\n%s", name, traceback.format_exc())
        return ArmResult.failure(name, f"{type(exc).__name__}: {exc}", max_num_seqs=spec.max_num_seqs)
    finally:
        gc.collect()


def run_bench(
    spec: BenchSpec,
    arms: Mapping[str, ArmFn],
    *,
    inputs: BenchInputs | None = None,
    isolate: bool = True,
    on_result: Callable[[ArmResult], None] | None = None,
    rounds: int = 1,
) -> list[ArmResult]:
    """Write (or reuse) the inputs, then run every arm of ``arms`` in its order, each after the last has
    released its engine, ``rounds`` times over (results round after round, ``benchmarks.harness.rounds``).
    ``inputs`` skips the writing (a sweep prepares them once)."""
    if inputs is None:
        inputs = prepare_inputs(spec)
    photos = inputs.arm_photos()
    results: list[ArmResult] = []
    for name, fn in [(n, f) for _ in range(rounds) for n, f in arms.items()]:
        log.info(
            "arm %s: %d timed photos (+%d warm-up), model %s", name, len(inputs.photos), len(inputs.warmup), spec.model
        )
        t0 = time.perf_counter()
        ref = reference(fn) if isolate else None
        if ref is not None:
            res = _run_child(ref, name, spec, inputs.model_dir, photos)
        else:
            res = _run_here(fn, name, spec, inputs.model_dir, photos)
        res.name = name
        log.info("arm %s done in %.1f s wall (engine load included)", name, time.perf_counter() - t0)
        results.append(res)
        if on_result is not None:
            on_result(res)
    return results


def _child_main(request_path: Path) -> int:
    req = json.loads(request_path.read_text())
    spec = BenchSpec.model_validate(req["spec"])
    fn = _resolve(req["arm"])
    res = _run_here(fn, req["name"], spec, Path(req["model_dir"]), [Path(p) for p in req["photos"]])
    res.name = req["name"]
    Path(req["out"]).write_text(json.dumps(res.to_dict()))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one benchmark arm (used by run_bench).")
    parser.add_argument("--child", type=Path, required=True, help="Request JSON written by run_bench.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("httpx", "httpx2", "httpcore", "openai"):  # one line per request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return _child_main(args.child)


if __name__ == "__main__":
    sys.exit(main())
