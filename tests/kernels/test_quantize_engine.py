"""The compressed-tensors export of the tiny Qwen2-VL loads in the vLLM CPU engine and generates with INT8 kernels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.quantize import QuantizeOptions, quantize_model

ROOT = Path(__file__).resolve().parents[2]

# LLM(...) spawns engine processes, so it runs in its own script under a __main__ guard.
SCRIPT = r"""
import json, sys
from PIL import Image
from vllm import LLM, SamplingParams
if __name__ == "__main__":
    llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=1024, kv_cache_memory_bytes=256 << 20,
              limit_mm_per_prompt={"image": 1}, enforce_eager=True)
    prompt = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe.<|im_end|>\n"
              "<|im_start|>assistant\n")
    sp = SamplingParams(max_tokens=8, temperature=0.0)
    o = llm.generate({"prompt": prompt, "multi_modal_data": {"image": Image.new("RGB", (64, 64), "red")}}, sp)[0]
    # One write of the whole line: the engine core process logs to the same stdout, and print() writes the text
    # and its newline apart, so a log line could land between them.
    sys.stdout.write("RESULT " + json.dumps({"token_ids": list(o.outputs[0].token_ids),
                                  "quantization": llm.llm_engine.vllm_config.model_config.quantization}) + "\n")
    sys.stdout.flush()
"""


@pytest.mark.engine
def test_compressed_tensors_export_generates_on_vllm_cpu(tiny_model: Path, tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    cpu = tmp_path / "w8a8-cpu"
    quantize_model(tiny_model, tmp_path / "w8a8", cpu_out=cpu, options=QuantizeOptions(prompts=("Describe.", "Hi.")))
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(cpu)], capture_output=True, text=True, timeout=540, cwd=ROOT
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    res = json.loads(lines[-1][len("RESULT ") :])
    assert res["quantization"] == "compressed-tensors"
    assert len(res["token_ids"]) > 0
    # The scheme vLLM picked for our config is the INT8 W8A8 one, run by a CPU INT8 GEMM kernel.
    logs = proc.stdout + proc.stderr
    assert "for CompressedTensorsW8A8Int8" in logs, logs[-4000:]
