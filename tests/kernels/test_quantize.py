"""``vlbatch quantize`` on the generated tiny Qwen2-VL: layout vllm-ascend expects, untouched float parts, error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

from cli.main import app
from kernels import w8a8
from kernels.quantize import QuantizeOptions, QuantizeReport, quantize_model
from kernels.quantize import evaluate as evaluate_mod
from kernels.quantize_errors import QuantizeError

# What vllm-ascend's 310P W8A8 static scheme creates per linear layer for an fp16 model, hence expects in
# the checkpoint (vllm_ascend/_310p/quantization/methods/w8a8_static.py + w8a8_base.py, main 182b75ea):
# name suffix -> (dtype, shape as a function of (N, K)).
ASCEND_W8A8 = {
    "weight": (torch.int8, lambda n, k: (n, k)),
    "input_scale": (torch.float16, lambda n, k: (1,)),
    "input_offset": (torch.int8, lambda n, k: (1,)),
    "quant_bias": (torch.int32, lambda n, k: (n,)),
    "deq_scale": (torch.int64, lambda n, k: (n,)),
    "weight_scale": (torch.float16, lambda n, k: (n, 1)),
    "weight_offset": (torch.float16, lambda n, k: (n, 1)),
}


def _tensors(d: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            for k in h.keys():  # noqa: SIM118
                out[k] = h.get_tensor(k)
    return out


@pytest.fixture(scope="module")
def quantized(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[QuantizeReport, Path, Path]:
    root = tmp_path_factory.mktemp("quantized")
    report = quantize_model(tiny_model, root / "w8a8", cpu_out=root / "w8a8-cpu")
    return report, root / "w8a8", root / "w8a8-cpu"


def test_vision_tower_embeddings_norms_and_lm_head_stay_float(
    tiny_model: Path, quantized: tuple[QuantizeReport, Path, Path]
) -> None:
    report, ascend, cpu = quantized
    src = _tensors(tiny_model)
    out, out_cpu = _tensors(ascend), _tensors(cpu)
    desc = json.loads((ascend / "quant_model_description.json").read_text())
    float_names = [n for n in src if n.startswith("visual.") or "norm" in n or "embed_tokens" in n or "lm_head" in n]
    assert any(n.startswith("visual.") for n in float_names) and any("layernorm" in n for n in float_names)
    for name in float_names:
        assert desc[name] == "FLOAT", name
        assert out[name].dtype == torch.float16, name  # 310P runs fp16 only
        assert torch.equal(out[name], src[name].to(torch.float16)), name
        assert torch.equal(out_cpu[name], src[name]), name  # the CPU copy keeps the source dtype bit for bit
    assert not any(p.startswith("visual.") or p == "lm_head" for p in report.quantized)
    assert sorted(report.kept_float) == sorted(
        {n.rsplit(".", 1)[0] for n in float_names if n.endswith("weight") and src[n].dim() == 2 and "embed" not in n}
    )


def test_every_w8a8_tensor_has_the_name_dtype_and_shape_vllm_ascend_loads(
    tiny_model: Path, quantized: tuple[QuantizeReport, Path, Path]
) -> None:
    report, ascend, _ = quantized
    src, out = _tensors(tiny_model), _tensors(ascend)
    desc = json.loads((ascend / "quant_model_description.json").read_text())
    assert desc.pop("model_quant_type") == "W8A8"
    # vllm-ascend looks up "<prefix>.weight" for every linear (KeyError otherwise): every tensor is described.
    assert set(desc) == set(out)
    # Every decoder linear of the language model is quantized (7 per layer, 2 layers).
    assert len(report.quantized) == 14
    for prefix in report.quantized:
        n, k = src[prefix + ".weight"].shape
        for suffix, (dtype, shape) in ASCEND_W8A8.items():
            t = out[f"{prefix}.{suffix}"]
            assert desc[f"{prefix}.{suffix}"] == "W8A8"
            assert t.dtype == dtype and tuple(t.shape) == shape(n, k), (prefix, suffix, t.dtype, t.shape)
        assert torch.equal(out[prefix + ".weight_offset"], torch.zeros(n, 1, dtype=torch.float16))
        if prefix + ".bias" in src:  # q/k/v biases: vLLM still loads the float parameter
            assert out[prefix + ".bias"].dtype == torch.float16
    # vLLM fuses q/k/v (gate/up) into one layer with one per-tensor input_scale: the shards must agree.
    for layer in ("model.layers.0", "model.layers.1"):
        for group in (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("mlp.gate_proj", "mlp.up_proj")):
            for suffix in ("input_scale", "input_offset"):
                vals = [out[f"{layer}.{m}.{suffix}"] for m in group]
                assert all(torch.equal(v, vals[0]) for v in vals), (layer, group, suffix)
    cfg = json.loads((ascend / "config.json").read_text())
    assert cfg["torch_dtype"] == "float16" and "quantization_config" not in cfg
    assert not (ascend / "model.safetensors.index.json").exists()
    assert (ascend / "tokenizer.json").exists() and (ascend / "preprocessor_config.json").exists()


def test_stored_tensors_reproduce_the_float_layers(
    quantized: tuple[QuantizeReport, Path, Path], tiny_model: Path
) -> None:
    """Rebuild each layer from the files alone (as the 310P would) and run the reference forward."""
    report, ascend, _ = quantized
    src, out = _tensors(tiny_model), _tensors(ascend)
    g = torch.Generator().manual_seed(0)
    for prefix in report.quantized:
        layer = w8a8.W8A8Linear(**{s: out[f"{prefix}.{s}"] for s in ASCEND_W8A8})
        scale, off = float(layer.input_scale), int(layer.input_offset)
        # Inputs spread over the calibrated range, which is where the layer is meant to be accurate.
        x = (torch.rand(64, layer.weight.shape[1], generator=g) * 255 - 128 - off) * scale
        want = x @ src[prefix + ".weight"].t() + src.get(prefix + ".bias", 0)
        got = w8a8.w8a8_linear(x, layer).to(torch.float32)
        assert evaluate_mod.cosine(got, want) > 0.999, prefix


def test_w8a8_forward_stays_close_to_the_float_model(quantized: tuple[QuantizeReport, Path, Path]) -> None:
    report = quantized[0]
    # Thresholds. INT8 with per-channel weights and a per-tensor activation range gives roughly 35-40 dB
    # SQNR on these activations, i.e. 1-3 % relative error per linear: cosine 0.999 allows ~4.5 % and
    # still fails a kernel that drops the offset correction or mis-encodes deq_scale (those give errors
    # of tens of percent). After two decoder layers the errors add up: 0.998 per hidden state. Top-1: the
    # tiny model has random weights, so many positions have a near-tie between the two best tokens (a
    # trained model has larger margins); 95 % tolerates those flips while a broken model (~1/448) fails.
    for e in report.linears:
        assert e.cosine > 0.999 and e.rel_error < 0.05, e
    assert len(report.model.hidden_cosine) == 3  # embeddings + 2 decoder layers
    assert report.model.hidden_cosine[0] == pytest.approx(1.0)  # embeddings are not quantized
    assert min(report.model.hidden_cosine) > 0.998
    assert report.model.logits_cosine > 0.998
    assert report.model.top1_agreement >= 0.95
    assert report.ascend_bytes < report.fp16_bytes
    text = report.format()
    assert "model.layers.1.mlp.down_proj" in text and "top-1 agreement" in text


def test_compressed_tensors_export_config_and_tensors(quantized: tuple[QuantizeReport, Path, Path]) -> None:
    report, ascend, cpu = quantized
    cfg = json.loads((cpu / "config.json").read_text())["quantization_config"]
    assert cfg["quant_method"] == "compressed-tensors" and cfg["format"] == "int-quantized"
    group = cfg["config_groups"]["group_0"]
    assert group["weights"]["strategy"] == "channel" and group["weights"]["symmetric"] is True
    assert group["input_activations"]["strategy"] == "tensor" and group["input_activations"]["dynamic"] is False
    assert "visual.blocks.0.attn.qkv" in cfg["ignore"] and "lm_head" in cfg["ignore"]
    out, a = _tensors(cpu), _tensors(ascend)
    for prefix in report.quantized:
        assert torch.equal(out[prefix + ".weight"], a[prefix + ".weight"])  # same integers on both engines
        assert out[prefix + ".weight_scale"].dtype == torch.float32
        assert float(out[prefix + ".input_scale"]) == float(a[prefix + ".input_scale"])
        assert torch.equal(out[prefix + ".input_zero_point"], a[prefix + ".input_offset"])
    assert not (cpu / "quant_model_description.json").exists()  # vllm-ascend would prefer ModelSlim


def test_bad_inputs_fail_cleanly(tiny_model: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    empty = tmp_path / "no-weights"
    empty.mkdir()
    shutil.copy(tiny_model / "config.json", empty / "config.json")
    res = runner.invoke(app, ["quantize", str(empty), str(tmp_path / "out")])
    assert res.exit_code == 2 and "no *.safetensors" in res.output

    odd = tmp_path / "odd-arch"
    shutil.copytree(tiny_model, odd)
    cfg = json.loads((odd / "config.json").read_text())
    cfg["architectures"] = ["MambaForCausalLM"]
    (odd / "config.json").write_text(json.dumps(cfg))
    res = runner.invoke(app, ["quantize", str(odd), str(tmp_path / "out")])
    assert res.exit_code == 2 and "MambaForCausalLM" in res.output and "not supported" in res.output

    text = tmp_path / "text-model"
    shutil.copytree(tiny_model, text)
    cfg["architectures"] = ["Qwen2ForCausalLM"]
    (text / "config.json").write_text(json.dumps(cfg))
    img = tmp_path / "x.png"
    img.write_bytes(b"")
    res = runner.invoke(app, ["quantize", str(text), str(tmp_path / "out"), "--image", str(img)])
    assert res.exit_code == 2 and "text model" in res.output and "--image" in res.output

    # A vision model given a file that is not an image: the message names the file.
    res = runner.invoke(app, ["quantize", str(tiny_model), str(tmp_path / "out"), "--image", str(img)])
    assert res.exit_code == 2 and f"calibration image {img} cannot be read" in res.output

    res = runner.invoke(app, ["quantize", str(tiny_model), str(tiny_model)])
    assert res.exit_code == 2 and "already exists" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no-weights", "odd-arch", "text-model", "x.png"]


def test_failure_midway_leaves_no_output(tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: object, **_k: object) -> None:
        raise QuantizeError("simulated failure after both checkpoints were written")

    monkeypatch.setattr(evaluate_mod, "model_error", boom)
    with pytest.raises(QuantizeError, match="simulated"):
        quantize_model(tiny_model, tmp_path / "a", cpu_out=tmp_path / "b", options=QuantizeOptions(prompts=("Hi.",)))
    assert list(tmp_path.iterdir()) == []


def test_a_w8a8_vision_tower_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    """Patterns that leave the vision tower to be quantized: refused before anything is written (vllm-ascend #14152)."""
    opts = QuantizeOptions(prompts=("Hi.",), keep_float=(r"(^|\.)lm_head$",))
    with pytest.raises(QuantizeError, match=r"vision-tower linears .* would be quantized .*vllm-ascend #14152"):
        quantize_model(tiny_model, tmp_path / "a", options=opts)
    assert list(tmp_path.iterdir()) == []


def test_options_reject_bad_values() -> None:
    with pytest.raises(QuantizeError, match="smooth-alpha"):
        QuantizeOptions(smooth_alpha=2.0)
    with pytest.raises(QuantizeError, match="regex"):
        QuantizeOptions(extra_keep_float=("(",))
    with pytest.raises(QuantizeError, match="static"):
        QuantizeOptions(cpu_activations="sometimes")  # type: ignore[arg-type]


def _tiny_text_model(tiny_vl: Path, out: Path) -> Path:
    """A random Qwen2ForCausalLM with grouped KV heads, reusing the tiny VL model's tokenizer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=448,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tiny_vl / name, out / name)
    return out


def test_text_model_with_smoothing_and_dynamic_cpu_activations(tiny_model: Path, tmp_path: Path) -> None:
    src_dir = _tiny_text_model(tiny_model, tmp_path / "text")
    opts = QuantizeOptions(prompts=("Hello world.", "The answer is yes."), smooth_alpha=0.5, cpu_activations="dynamic")
    report = quantize_model(src_dir, tmp_path / "a", cpu_out=tmp_path / "c", options=opts)
    assert len(report.quantized) == 14 and report.kept_float == ["lm_head"]
    src, out, cpu = _tensors(src_dir), _tensors(tmp_path / "a"), _tensors(tmp_path / "c")
    desc = json.loads((tmp_path / "a" / "quant_model_description.json").read_text())
    layer = "model.layers.0"
    # k_proj has half of q_proj's rows (grouped KV heads); the layout follows each layer's own N.
    assert tuple(out[f"{layer}.self_attn.k_proj.weight"].shape) == (32, 64)
    # Smoothing divided the norm by s and multiplied the weights' input channels by s: the norm changed,
    # stays FLOAT, and norm * W is preserved up to INT8 rounding.
    norm_src, norm_out = src[f"{layer}.input_layernorm.weight"], out[f"{layer}.input_layernorm.weight"]
    assert desc[f"{layer}.input_layernorm.weight"] == "FLOAT"
    assert not torch.equal(norm_out, norm_src.to(torch.float16))
    w_deq = out[f"{layer}.self_attn.q_proj.weight"].float() * out[f"{layer}.self_attn.q_proj.weight_scale"].float()
    product_out = w_deq * norm_out.float()
    product_src = src[f"{layer}.self_attn.q_proj.weight"] * norm_src
    assert evaluate_mod.cosine(product_out, product_src) > 0.999
    for e in report.linears:
        assert e.cosine > 0.999, e
    assert report.model.top1_agreement >= 0.95
    cfg = json.loads((tmp_path / "c" / "config.json").read_text())["quantization_config"]
    act = cfg["config_groups"]["group_0"]["input_activations"]
    assert act["strategy"] == "token" and act["dynamic"] is True and act["symmetric"] is True
    assert f"{layer}.self_attn.q_proj.input_scale" not in cpu
    # The CPU copy keeps the source dtype (fp32): the same smoothed norm, not rounded to fp16.
    torch.testing.assert_close(cpu[f"{layer}.input_layernorm.weight"].to(torch.float16), norm_out)


def _tiny_qwen3_vl(tiny_vl: Path, out: Path) -> Path:
    """A random Qwen3-VL (the VL family vllm-ascend lists for 300I Duo): deepstack mergers, q/k norms, GQA."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    vl = json.loads((tiny_vl / "config.json").read_text())
    ids = {k: vl[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}
    text = dict(
        vocab_size=448,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        rope_theta=1e6,
        rope_scaling={"rope_type": "default", "mrope_section": [4, 6, 6], "mrope_interleaved": True},
    )
    vision = dict(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        out_hidden_size=64,
        patch_size=16,
        spatial_merge_size=2,
        temporal_patch_size=2,
        deepstack_visual_indexes=[1],
        num_position_embeddings=64,
    )
    torch.manual_seed(0)
    Qwen3VLForConditionalGeneration(Qwen3VLConfig(text_config=text, vision_config=vision, **ids)).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        shutil.copy(tiny_vl / name, out / name)
    image = {
        "image_processor_type": "Qwen2VLImageProcessorFast",
        "processor_class": "Qwen3VLProcessor",
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": [0.5] * 3,
        "image_std": [0.5] * 3,
        "size": {"shortest_edge": 4096, "longest_edge": 200704},
    }
    (out / "preprocessor_config.json").write_text(json.dumps(image))
    video = {k: v for k, v in image.items() if k != "image_processor_type"}
    (out / "video_preprocessor_config.json").write_text(
        json.dumps({**video, "video_processor_type": "Qwen3VLVideoProcessor"})
    )
    return out


def test_qwen3_vl_keeps_vision_and_qk_norms_float(tiny_model: Path, tmp_path: Path) -> None:
    src_dir = _tiny_qwen3_vl(tiny_model, tmp_path / "q3vl")
    report = quantize_model(src_dir, tmp_path / "a", options=QuantizeOptions(prompts=("Describe.", "Tags?")))
    src, out = _tensors(src_dir), _tensors(tmp_path / "a")
    desc = json.loads((tmp_path / "a" / "quant_model_description.json").read_text())
    assert len(report.quantized) == 14
    assert all(p.startswith("model.language_model.layers.") for p in report.quantized)
    for name, t in src.items():
        if name.startswith("model.visual.") or "norm" in name or "embed_tokens" in name or name.startswith("lm_head"):
            assert desc[name] == "FLOAT" and torch.equal(out[name], t.to(torch.float16)), name
    assert any("deepstack_merger_list" in n for n in src) and any("q_norm" in n for n in src)
    for prefix in report.quantized:
        n, k = src[prefix + ".weight"].shape
        for suffix, (dtype, shape) in ASCEND_W8A8.items():
            t = out[f"{prefix}.{suffix}"]
            assert t.dtype == dtype and tuple(t.shape) == shape(n, k), (prefix, suffix)
    assert min(e.cosine for e in report.linears) > 0.999
    assert report.model.top1_agreement >= 0.95
