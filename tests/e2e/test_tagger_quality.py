"""The shipped tiny tagging model against its W8A8 compressed-tensors copy, in one `vlbatch eval --compare` run on
the real CPU engine (two loads, one per side): the model's accuracy on held-out generated scenes, the same answers
as plain transformers, the agreement of the two deployments and its gate, and the copy running on vLLM CPU's INT8
kernels. The assertions of three earlier tests live here, each marked with the one it came from:
[accuracy] the trained tagger's held-out accuracy and transformers parity (an in-process eval of the model),
[compare] the eval compare of the W8A8 copy, [w8a8] the compressed-tensors export generating on vLLM CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.demo import DEMO_MODEL_DIR, DEMO_OPTIONS, labelled_set, model_ready, scene_of, write_labelled_folder
from cli.evaluation.labels import read_labels
from cli.evaluation.run import read_results
from tests.support.engine import TEST_ENGINE, child_env

pytestmark = [pytest.mark.engine("w8a8"), pytest.mark.timeout(1500)]

HELD_OUT_SEED = 7  # the model was trained on seed 1's pictures
ITEMS = 36
ROOT = Path(__file__).resolve().parents[2]


def _vlbatch(args: list[str], *, timeout: float, log_file: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "from cli.main import main; main()", *args]
    env = child_env(VLBATCH_LOG_FILE=str(log_file))  # the engines' lines go there, not to the terminal
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def test_the_tagger_and_its_w8a8_copy_answer_alike_and_accurately(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    from engine.training import Example, hf_greedy
    from kernels.quantize import QuantizeOptions, quantize_model
    from pipelines.image_tagging import SYSTEM_PREFIX, user_prompt

    cpu = tmp_path / "w8a8-cpu"
    quantize_model(
        DEMO_MODEL_DIR, tmp_path / "w8a8", cpu_out=cpu, options=QuantizeOptions(prompts=("Give up to 5 short tags.",))
    )
    labels = read_labels(write_labelled_folder(tmp_path / "set", count=ITEMS, seed=HELD_OUT_SEED))
    proc = _vlbatch(
        [
            "eval", str(tmp_path / "set"),
            "--compare", str(DEMO_MODEL_DIR), str(cpu),
            "--options", DEMO_OPTIONS.model_dump_json(),
            "--engine", json.dumps(TEST_ENGINE),
            "--out", str(tmp_path / "eval"),
        ],
        timeout=1300,
        log_file=tmp_path / "eval.log",
    )  # fmt: skip
    print(proc.stdout)
    doc = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert proc.returncode == 0 and doc["passed"], proc.stderr[-4000:]  # [compare]

    # [accuracy] The shipped model (side A) on held-out scenes: every answer parses, none cut short, tags right.
    scores = doc["scores"][0]
    assert scores["answered"] == ITEMS and scores["parse_rate"] == 1.0 and scores["truncation_rate"] == 0.0
    assert scores["tags_overall"]["f1"] >= 0.8  # [accuracy] and [compare]
    by_name = {Path(r["ref"]).stem: r for r in read_results(tmp_path / "eval" / "a.jsonl")}  # tags as names
    scenes = [e for e in labels if e.label and scene_of([e.label]) == e.label]
    hits = sum(scene_of(by_name[e.path.stem]["tags"]) == e.label for e in scenes)
    assert hits / len(scenes) >= 0.8, (hits, len(scenes))
    # [accuracy] The engine (with the schema's grammar) answers as the training-time transformers forward does.
    items = labelled_set(ITEMS, seed=HELD_OUT_SEED)[:6]
    prompt = user_prompt(DEMO_OPTIONS, 1)
    examples = [Example(model_ready(it.image, max_visual_tokens=64), SYSTEM_PREFIX, prompt, "") for it in items]
    assert [by_name[it.name]["raw_text"] for it in items] == hf_greedy(DEMO_MODEL_DIR, examples)

    # [compare] The agreement of the two deployments, as the report states it.
    cmp = doc["comparison"]
    assert cmp["items"] == ITEMS and 0.0 <= cmp["agreement"] <= 1.0
    assert len(cmp["differing"]) == round(ITEMS * (1 - cmp["agreement"]))
    assert "items agree" in proc.stdout

    # [w8a8] The copy is compressed-tensors to vLLM, which runs its linear layers with the INT8 W8A8 scheme (a CPU
    # INT8 GEMM kernel; the engine core logs the choice) and answers every item with generated tokens.
    assert json.loads((cpu / "config.json").read_text())["quantization_config"]["quant_method"] == "compressed-tensors"
    logs = (tmp_path / "eval.log").read_text()  # the engine cores' lines
    assert "quantization=compressed-tensors" in logs, logs[-4000:]
    assert "for CompressedTensorsW8A8Int8" in logs, logs[-4000:]
    copy_rows = read_results(tmp_path / "eval" / "b.jsonl")
    assert len(copy_rows) == ITEMS and all(r["completion_tokens"] > 0 for r in copy_rows)

    # [compare] The gate: an agreement above 1 cannot be met, so the same command exits 1 and says why (no new
    # engine: the runs' exports are compared again).
    gate = _vlbatch(
        [
            "eval", str(tmp_path / "set"),
            "--compare", str(tmp_path / "eval" / "a.jsonl"), str(tmp_path / "eval" / "b.jsonl"),
            "--min-agreement", "1.01", "--out", str(tmp_path / "gate"),
        ],
        timeout=120,
        log_file=tmp_path / "gate.log",
    )  # fmt: skip
    assert gate.returncode == 1 and "below --min-agreement 1.01" in gate.stdout
    assert json.loads((tmp_path / "gate" / "eval.json").read_text())["comparison"] == cmp
