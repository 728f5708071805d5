import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.tiny_model import write_tiny_qwen2_vl

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
from PIL import Image
from vllm import LLM, SamplingParams
from vllm.sampling_params import StructuredOutputsParams
if __name__ == "__main__":
    llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=2048, kv_cache_memory_bytes=256 << 20,
              limit_mm_per_prompt={"image": 2}, enforce_eager=True,
              structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True})
    prompt = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe.<|im_end|>\n"
              "<|im_start|>assistant\n")
    schema = {"type": "object", "properties": {"caption": {"type": "string"}}, "required": ["caption"]}
    sp = SamplingParams(max_tokens=30, structured_outputs=StructuredOutputsParams(json=schema))
    o = llm.generate({"prompt": prompt, "multi_modal_data": {"image": Image.new("RGB", (64, 64), "red")}}, sp)[0]
    # One write of the whole line: the engine core process logs to the same stdout, and print() writes the text
    # and its newline apart, so a log line could land between them.
    sys.stdout.write("RESULT " + json.dumps({"text": o.outputs[0].text, "prompt_tokens": len(o.prompt_token_ids),
                                  "completion_tokens": len(o.outputs[0].token_ids)}) + "\n")
    sys.stdout.flush()
"""


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


@pytest.mark.engine
def test_tiny_model_generates_with_image(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    d = write_tiny_qwen2_vl(tmp_path / "m")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(d)], capture_output=True, text=True, timeout=540, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    res = json.loads(lines[-1][len("RESULT ") :])
    assert res["text"]
    assert res["text"].startswith("{")
    assert res["prompt_tokens"] > 4
    assert res["completion_tokens"] > 0
