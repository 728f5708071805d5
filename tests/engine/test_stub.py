"""The stub engine (``engine.runtime.stub``) through the real ``EngineRunner``: chosen by the engine configuration,
counted as a stub load, and every field does what its docstring says. No model, no vLLM."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from pydantic import ValidationError

from engine.canary import canary_requests, run_canary
from engine.runtime.config import EngineConfig
from engine.runtime.load_ledger import loads
from engine.runtime.requests import EngineCrashed, GenerationRequest, GenerationResult
from engine.runtime.runner import EngineRunner
from engine.runtime.stub import smallest_instance
from engine.vision import VisionGeometry
from pipelines import classify, extract, image_tagging

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]


def _runner(tmp_path: Path, **stub: Any) -> EngineRunner:
    config = EngineConfig.model_validate({"model": "stub-model", "backend": "stub", "max_num_seqs": 4, "stub": stub})
    runner = EngineRunner(config, load_ledger=tmp_path / "loads.tsv")
    runner.load()
    return runner


def _req(rid: str, prompt: str = "Say OK.", **kw: Any) -> GenerationRequest:
    return GenerationRequest(request_id=rid, prompt=prompt, **kw)


def _one(runner: EngineRunner, req: GenerationRequest, timeout: float = 10) -> GenerationResult:
    return runner.submit([req])[0].result(timeout)


def test_the_configuration_chooses_the_stub_and_its_load_is_logged_and_counted_apart_from_vllm(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="engine.runtime.runner"):
        runner = _runner(tmp_path)
    try:
        assert _one(runner, _req("a")).text == "OK"
    finally:
        runner.close()
    assert "loading engine for stub-model" in caplog.text  # restarts are counted by this line, as for vLLM
    ledger = tmp_path / "loads.tsv"
    assert loads(ledger) == []  # no vLLM load: the budget does not count it
    assert [model for _, _, model in loads(ledger, backend="stub")] == ["stub-model"]


def test_a_stub_section_needs_the_stub_backend() -> None:
    with pytest.raises(ValidationError, match='"backend": "stub"'):
        EngineConfig.model_validate({"model": "m", "stub": {"answer": "x"}})
    with pytest.raises(ValidationError):
        EngineConfig.model_validate({"model": "m", "backend": "stub", "stub": {"answr": "x"}})  # a typo is refused


def test_answers_and_token_counts_are_deterministic_from_the_request(tmp_path: Path) -> None:
    runner = _runner(tmp_path, answer="a fixed answer", chars_per_token=2, media_tokens=10)
    try:
        text = _one(runner, _req("t", prompt="x" * 11))
        image = _one(runner, _req("i", prompt="x" * 11, images=[Image.new("RGB", (8, 8), "red")]))
        again = _one(runner, _req("t2", prompt="x" * 11))
        cut = _one(runner, _req("c", max_tokens=3))
    finally:
        runner.close()
    assert (text.text, text.prompt_tokens, text.completion_tokens, text.finish_reason) == (
        "a fixed answer",
        6,  # ceil(11 / 2)
        7,  # ceil(14 / 2)
        "stop",
    )
    assert image.prompt_tokens == 6 + 10 and again.prompt_tokens == text.prompt_tokens
    assert (cut.text, cut.completion_tokens, cut.finish_reason) == ("a fixe", 3, "length")  # max_tokens holds


def test_a_request_with_a_schema_gets_its_smallest_instance_which_every_pipeline_parses(tmp_path: Path) -> None:
    tagging = image_tagging.TaggingOptions(max_tags=3, caption=True)
    labels = classify.ClassifyOptions(labels=["invoice", "letter"])
    fields = extract.ExtractOptions(
        json_schema={
            "type": "object",
            "properties": {"total": {"type": "number"}, "items": {"type": "array", "items": {"type": "string"}}},
            "required": ["total"],
        }
    )
    schemas = {
        "tag": image_tagging.output_schema(tagging),
        "classify": classify.output_schema(labels),
        "extract": extract.output_schema(fields),
    }
    runner = _runner(tmp_path)
    try:
        answers = {k: _one(runner, _req(k, json_schema=s, max_tokens=200)).text for k, s in schemas.items()}
    finally:
        runner.close()
    tags = image_tagging.parse_answer(answers["tag"], tagging, finish_reason="stop")
    assert len(tags["tags"]) == 1 and tags["tags"][0] and tags["caption"] == ""
    assert classify.parse_answer(answers["classify"], labels, finish_reason="stop")
    assert extract.parse_answer(answers["extract"], fields, finish_reason="stop") is not None
    assert json.loads(answers["classify"])["label"] == "invoice"  # the first enum value


def test_smallest_instance_follows_refs_bounds_and_alternatives() -> None:
    schema = {
        "$defs": {"n": {"type": "integer", "minimum": 3}},
        "type": "object",
        "properties": {
            "n": {"$ref": "#/$defs/n"},
            "s": {"type": "string", "pattern": "^[0-9]{2,4}$"},
            "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "pair": {"type": "array", "items": {"type": "boolean"}, "minItems": 2},
            "optional": {"type": "string"},
        },
        "required": ["n", "s", "maybe", "pair"],
    }
    assert smallest_instance(schema) == {"n": 3, "s": "00", "maybe": None, "pair": [False, False]}


@pytest.mark.parametrize(
    ("stub", "request_kw"),
    [
        ({"poison_seeds": [7]}, {"seed": 7}),
        ({"poison_markers": ["POISON"]}, {"prompt": "a POISON prompt"}),
        ({"poison_colours": [[0, 0, 0]]}, {"images": [Image.new("RGB", (8, 8), (0, 0, 0))]}),
        ({"crash_on_images": True}, {"images": [Image.new("RGB", (8, 8), "white")]}),
    ],
    ids=["seed", "marker", "colour", "every-image"],
)
def test_a_poisoned_request_kills_the_engine_and_a_restart_serves_the_rest(
    tmp_path: Path, stub: dict[str, Any], request_kw: dict[str, Any]
) -> None:
    runner = _runner(tmp_path, **stub)
    try:
        bad, good = runner.submit([_req("bad", **request_kw), _req("good")])
        with pytest.raises(EngineCrashed) as crash:
            bad.result(10)
        with pytest.raises(EngineCrashed):  # side by side in the dead engine: a bystander, failed with it
            good.result(10)
        assert crash.value.in_flight == 2
        runner.restart(crashed_generation=crash.value.generation)
        assert _one(runner, _req("innocent")).text == "OK"  # the same kind without the poison is answered
        assert runner.generation == 2
    finally:
        runner.close()
    assert len(loads(tmp_path / "loads.tsv", backend="stub")) == 2


def test_an_engine_that_crashes_on_every_image_fails_the_canary_on_images_only(tmp_path: Path) -> None:
    runner = _runner(tmp_path, crash_on_images=True)
    geometry = VisionGeometry()
    try:
        broken = run_canary(runner, canary_requests(lambda s, u, n: u, geometry, images=True, tag="1"), timeout_s=10)
        runner.restart(crashed_generation=runner.generation)
        text_only = run_canary(
            runner, canary_requests(lambda s, u, n: u, geometry, images=False, tag="2"), timeout_s=10
        )
    finally:
        runner.close()
    assert not broken.ok and broken.reason is not None and "crashes on an image request" in broken.reason
    assert text_only.ok


def test_a_hanging_engine_is_failed_by_the_stall_watchdog_and_can_be_closed(tmp_path: Path) -> None:
    runner = _runner(tmp_path, hang=True)
    runner.watchdog_interval_s = 0.05
    runner.stall_s = 0.5
    try:
        fut = runner.submit([_req("stuck")])[0]
        with pytest.raises(EngineCrashed, match="engine hung"):
            fut.result(10)
        assert not runner.healthy(max_stall_s=0.5)
    finally:
        runner.close()  # the stuck step returns once the engine is shut down


def test_an_engine_idle_for_longer_than_the_stall_bound_is_not_called_hung(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    runner.watchdog_interval_s = 0.05
    runner.stall_s = 0.3
    try:
        assert runner.submit([_req("before")])[0].result(10).text == "OK"
        time.sleep(1.0)  # idle, nothing in flight: three stall bounds and more
        assert runner.in_engine == 0
        assert runner.healthy(max_stall_s=0.3)
        assert runner.submit([_req("after")])[0].result(10).text == "OK"
    finally:
        runner.close()


def test_slow_steps_hold_the_answer_for_their_seconds(tmp_path: Path) -> None:
    runner = _runner(tmp_path, step_s=0.4, steps_per_request=2)
    try:
        fut = runner.submit([_req("slow")])[0]
        with pytest.raises(TimeoutError):
            fut.result(0.3)  # two steps of 0.4 s each: not before 0.8 s
        assert fut.result(10).text == "OK"
    finally:
        runner.close()


def test_nothing_finishes_until_the_gate_file_exists(tmp_path: Path) -> None:
    gate = tmp_path / "open"
    runner = _runner(tmp_path, gate_file=str(gate))
    try:
        fut: Future[GenerationResult] = runner.submit([_req("held")])[0]
        with pytest.raises(TimeoutError):
            fut.result(0.5)
        assert runner.in_engine == 1  # admitted and stepping, only held
        gate.touch()
        assert fut.result(10).text == "OK"
    finally:
        runner.close()


def test_the_stub_path_imports_neither_vllm_nor_torch(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from engine.runtime.config import EngineConfig\n"
        "from engine.runtime.requests import GenerationRequest\n"
        "from engine.runtime.runner import EngineRunner\n"
        "r = EngineRunner(EngineConfig(model='m', backend='stub'))\n"
        "r.load()\n"
        "print(r.submit([GenerationRequest(request_id='a', prompt='hi')])[0].result(10).text)\n"
        "r.close()\n"
        "print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["OK", "[]"]
