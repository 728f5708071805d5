import json
from pathlib import Path

import pytest
from PIL import Image

from engine.runtime.requests import GenerationRequest
from engine.runtime.runner import EngineRunner
from engine.tiny_model import write_tiny_qwen2_vl

PROMPT = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe.<|im_end|>\n<|im_start|>assistant\n"


def test_tiny_model_files(tmp_path: Path) -> None:
    d = write_tiny_qwen2_vl(tmp_path / "m")
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "preprocessor_config.json",
        "video_preprocessor_config.json",
    ):
        assert (d / name).exists(), name
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2VLForConditionalGeneration"]


@pytest.mark.engine("shared")
@pytest.mark.timeout(900)
def test_tiny_model_generates_with_image(shared_engine: EngineRunner) -> None:
    """An image request with a JSON schema on the real engine (the run's shared one, the tiny model): the random
    weights sample, the grammar makes the answer JSON."""
    schema = {"type": "object", "properties": {"caption": {"type": "string"}}, "required": ["caption"]}
    request = GenerationRequest(
        request_id="tiny-image-json",
        prompt=PROMPT,
        images=[Image.new("RGB", (64, 64), "red")],
        max_tokens=30,
        temperature=1.0,  # sampled, as vLLM's default parameters sample
        json_schema=schema,
    )
    (future,) = shared_engine.submit([request])
    res = future.result(timeout=600)
    assert res.text
    assert res.text.startswith("{")
    assert res.prompt_tokens > 4
    assert res.completion_tokens > 0
