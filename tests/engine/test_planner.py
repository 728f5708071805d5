"""Planner arithmetic checked against published parameter counts, the real 310P start-up logs, and independent
computations from the config.json fixtures (tests/engine/fixtures/model_configs; each file's ``_source`` says
where its fields were read)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from engine.devices import get_card
from engine.planning.command import run_plan
from engine.planning.memory import kv_cache_bytes, kv_tokens, weight_bytes
from engine.planning.planner import PlanError, plan
from engine.planning.render import render_compose, render_text
from engine.planning.request import PlanRequest
from engine.planning.shapes import ModelConfigError, read_model_config, shape_from_dict
from engine.platforms.ascend310p import Ascend310PPlatform
from engine.runtime.config import EngineConfig

CONFIGS = Path(__file__).parent / "fixtures" / "model_configs"
GIB = 1024**3


def cfg(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def shape(name: str):
    return read_model_config(CONFIGS / f"{name}.json")


# Published totals: HF model cards / model pages (Qwen3-VL-8B 8.77B on its LM Studio page, Qwen2.5-VL 3.75B and
# 8.29B on their HF pages, Qwen3-32B "32.8B" and Qwen3-4B "4.0B" in the Qwen3 model cards, Qwen2.5-0.5B 0.49B).
@pytest.mark.parametrize(
    ("name", "published_b", "rel"),
    [
        ("qwen3-vl-8b-instruct", 8.77, 0.005),
        ("qwen2.5-vl-7b-instruct", 8.29, 0.005),
        ("qwen2.5-vl-3b-instruct", 3.75, 0.005),
        ("qwen3-32b", 32.8, 0.005),
        ("qwen3-4b", 4.02, 0.005),
        ("qwen2.5-0.5b-instruct", 0.494, 0.005),
    ],
)
def test_param_count_matches_published_total(name: str, published_b: float, rel: float) -> None:
    assert shape(name).params / 1e9 == pytest.approx(published_b, rel=rel)


@pytest.mark.parametrize("name", ["qwen3-vl-8b-instruct", "qwen2.5-vl-7b-instruct", "qwen3-32b", "qwen3-4b"])
def test_kv_bytes_per_token_from_config(name: str) -> None:
    raw = cfg(name)
    t = raw.get("text_config", raw)
    head_dim = t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"]
    expected = 2 * t["num_hidden_layers"] * t["num_key_value_heads"] * head_dim * 2  # K and V, fp16
    s = shape(name)
    assert s.text.kv_bytes_per_token() == expected
    assert s.text.kv_bytes_per_token(tp=2) == expected // 2


def test_qwen3_32b_kv_per_token_matches_published_analysis() -> None:
    # 262,144 bytes per token at fp16 for Qwen3-32B (analysis pinned to the config revision, see _source).
    assert shape("qwen3-32b").text.kv_bytes_per_token() == 262_144


def test_vision_parts_are_read() -> None:
    v3 = shape("qwen3-vl-8b-instruct").vision
    v25 = shape("qwen2.5-vl-7b-instruct").vision
    assert v3 is not None and v3.kind == "qwen3_vl" and v3.deepstack == 3 and v3.patch_size == 16
    assert v25 is not None and v25.kind == "qwen2_5_vl" and v25.full_attention_layers == 4
    assert v25.window_patches == 64  # 112 px windows of 14 px patches
    # 1024 LLM tokens = 4096 ViT patches after the 2x2 merge.
    assert v3.patches_per_image(1024) == 4096
    assert shape("qwen3-32b").vision is None


# ---- the engine's KV accounting against the posted 310P logs ----------------------------------------------------


def test_log_3316_qwen25_05b_kv_tokens() -> None:
    # "Available memory: 40178937036, total memory: 49602220032" -> "GPU KV cache size: 3,269,760 tokens",
    # "Maximum concurrency for 32,768 tokens per request: 99.79x".
    per_tok = shape("qwen2.5-0.5b-instruct").text.kv_bytes_per_token()
    tokens = kv_tokens(40178937036, bytes_per_token=per_tok, block_size=128)
    assert tokens == 3_269_760
    assert round(tokens / 32768, 2) == 99.79


def test_log_3479_qwen3_4b_kv_tokens_and_weights() -> None:
    # util 0.8, "Loading model weights took 7.5553 GB", "Available memory: 26954181529, total memory: 46431260672",
    # "GPU KV cache size: 182,784 tokens", "Maximum concurrency for 4,096 tokens per request: 44.62x".
    s = shape("qwen3-4b")
    tokens = kv_tokens(26954181529, bytes_per_token=s.text.kv_bytes_per_token(), block_size=128)
    assert tokens == 182_784
    assert round(tokens / 4096, 2) == 44.62
    assert weight_bytes(s, "fp16") / GIB == pytest.approx(7.5553, rel=0.015)
    # The legacy (<= 0.17) formula reproduces the log once the measured activation is put in.
    total, logged = 46431260672, 26954181529
    activation = int(total * 0.8) - int(7.5553 * GIB) - logged
    assert 1.5 * GIB < activation < 2.5 * GIB
    got = kv_cache_bytes(
        total_bytes=total,
        utilization=0.8,
        weights_bytes=int(7.5553 * GIB),
        activation_bytes=activation,
        non_torch_bytes=0,
        halved=False,
    )
    assert got == logged
    # The same start under vllm-ascend >= 0.18 keeps half of it.
    halved = kv_cache_bytes(
        total_bytes=total,
        utilization=0.8,
        weights_bytes=int(7.5553 * GIB),
        activation_bytes=activation,
        non_torch_bytes=0,
        halved=True,
    )
    assert halved == logged // 2


def test_log_3316_weights_and_the_quadratic_mask() -> None:
    # "Loading model weights took 0.9299 GB" for Qwen2.5-0.5B.
    s = shape("qwen2.5-0.5b-instruct")
    assert weight_bytes(s, "fp16") / GIB == pytest.approx(0.9299, rel=0.015)
    # At max_model_len 32768 the activation peak (util assumed at the 0.9 default; the log does not print it) is
    # almost all the 310P's max_model_len^2 causal mask (fp16 mask + bool source = 3 bytes per cell).
    activation = int(0.9 * 49602220032) - 40178937036 - int(0.9299 * GIB)
    mask = 3 * 32768**2
    assert 0.85 < mask / activation < 1.0


def test_kv_cache_is_negative_when_weights_do_not_fit() -> None:
    assert (
        kv_cache_bytes(
            total_bytes=10 * GIB,
            utilization=0.86,
            weights_bytes=9 * GIB,
            activation_bytes=GIB,
            non_torch_bytes=0,
            halved=True,
        )
        < 0
    )


# ---- layouts ----------------------------------------------------------------------------------------------------


def test_qwen3_vl_8b_one_engine_per_chip_on_300i_duo() -> None:
    s = shape("qwen3-vl-8b-instruct")
    p = plan(s, PlanRequest(cards=2, device_ids=[0, 1, 4, 5], max_model_len=16384))
    assert p.tp == 1
    assert [e.device_ids for e in p.engines] == [[0], [1], [4], [5]]
    assert [e.env["ASCEND_RT_VISIBLE_DEVICES"] for e in p.engines] == ["0", "1", "4", "5"]
    # Independent: halved accounting with the plan's own activation estimate.
    total = 43693 * 1024**2
    expected_kv = (int(total * 0.86) - p.weight_bytes_per_rank - p.activation_bytes_per_rank - 128 * 1024**2) // 2
    assert p.kv_bytes_per_rank == expected_kv
    assert p.kv_tokens == expected_kv // (147456 * 128) * 128
    assert p.max_concurrent_seqs == p.kv_tokens // (256 + 1024 + 256)
    assert p.weight_bytes_per_rank == 2 * s.params


def test_qwen3_32b_w8a8_needs_a_card_per_engine() -> None:
    s = shape("qwen3-32b")
    req = {"quantization": "w8a8", "prompt_text_tokens": 2048, "output_tokens": 512, "max_model_len": 8192}
    one = plan(s, PlanRequest(cards=1, **req))
    two = plan(s, PlanRequest(cards=2, **req))
    assert one.tp == 2 and [e.device_ids for e in one.engines] == [[0, 1]]
    assert two.tp == 2 and [e.device_ids for e in two.engines] == [[0, 1], [2, 3]]
    # W8A8 keeps embeddings + lm_head (2 x 151936 x 5120) in fp16 and the decoder linears in int8.
    emb = 2 * 151936 * 5120
    assert 1.0 < one.weight_bytes_total / (s.params - emb + 2 * emb) < 1.01
    assert one.engines[0].env["HCCL_OP_EXPANSION_MODE"] == "AIV"


def test_does_not_fit_says_what_would() -> None:
    s = shape("qwen3-32b")
    with pytest.raises(PlanError) as e:
        plan(s, PlanRequest(card="atlas-300i-pro", cards=1, images_per_prompt=0))
    msg = str(e.value)
    assert "does not fit 1 x ascend-310p3-24g at TP1:" in msg
    assert "W8A8 on" in msg and "FP16 on" in msg


def test_refusal_names_the_layout_asked_for_and_its_own_numbers() -> None:
    # Qwen3-32B W8A8 on one 300I Duo fits at TP2; asked for TP1 the refusal must speak of TP1, not of TP2.
    s = shape("qwen3-32b")
    req = PlanRequest(quantization="w8a8", images_per_prompt=0, tensor_parallel_size=1)
    with pytest.raises(PlanError) as e:
        plan(s, req)
    msg = str(e.value)
    assert "does not fit 2 x ascend-310p3 at TP1 (tensor_parallel_size=1 as asked):" in msg
    # The figures are TP1's: all the weights on one chip, and the KV tokens that leaves is below max_model_len.
    one_chip = weight_bytes(s, "w8a8") / GIB
    assert f"each chip holds {one_chip:.1f} GiB weights" in msg
    tokens = int(msg.split("leaving ")[1].split(" KV tokens")[0])
    assert 0 < tokens < 8192 and "KV tokens < max_model_len=8192" in msg
    assert f"or max_model_len <= {tokens} at TP1" in msg
    assert "W8A8 on 2 chips (TP2)" in msg
    assert plan(s, req.model_copy(update={"tensor_parallel_size": 2})).tp == 2


def test_310p_rules() -> None:
    vl = shape("qwen3-vl-8b-instruct")
    with pytest.raises(PlanError, match=r"0\.85-0\.88"):
        plan(vl, PlanRequest(gpu_memory_utilization=0.9, max_model_len=8192))
    with pytest.raises(PlanError, match="16384"):
        plan(vl, PlanRequest(max_model_len=32768))
    with pytest.raises(PlanError, match="max_position_embeddings=40960"):
        plan(shape("qwen3-32b"), PlanRequest(quantization="w8a8", cards=2, max_model_len=65536))
    with pytest.raises(PlanError, match="W8A8 variants only"):
        plan(shape("qwen3-32b"), PlanRequest(quantization="w4a8"))
    p910 = plan(shape("qwen3-32b"), PlanRequest(card="atlas-800t-a2", quantization="w4a8"))
    assert p910.engines[0].engine_args["dtype"] == "bfloat16"


def test_300i_duo_support_matrix_rules() -> None:
    """vllm-ascend's 300I Duo support matrix: VLMs in float16 only, Qwen3-VL at most 16k (the [len, len] fp16 mask
    named), max_model_len explicit, graph capture FULL_DECODE_ONLY on CANN >= 9.0 and eager below."""
    vl = shape("qwen3-vl-8b-instruct")
    with pytest.raises(PlanError, match=r"dtype bfloat16 for .* on 310P: vllm-ascend runs vision-language models"):
        plan(vl, PlanRequest(dtype="bfloat16"))
    assert plan(vl, PlanRequest(dtype="float16")).engines[0].engine_args["dtype"] == "float16"
    # A text model is not a VLM, but 310P has no bf16 at all: refused by the platform's dtypes.
    with pytest.raises(PlanError, match=r"dtype bfloat16 for .* on 310P: it runs float16"):
        plan(shape("qwen3-4b"), PlanRequest(dtype="bfloat16"))
    with pytest.raises(PlanError, match=r"\[max_model_len, max_model_len\] fp16 mask .* set max_model_len <= 16384"):
        plan(vl, PlanRequest(max_model_len=16385))
    p = plan(vl, PlanRequest(max_model_len=16384))
    assert p.engines[0].engine_args["max_model_len"] == 16384
    assert any(n.startswith("max_model_len=16384 is set explicitly: the attention builds a full") for n in p.notes)
    graph = p.engines[0].engine_args
    assert graph["enforce_eager"] is False
    assert graph["extra"]["compilation_config"]["cudagraph_mode"] == "FULL_DECODE_ONLY"  # type: ignore[index]
    assert plan(vl, PlanRequest(cann_version="9.1.0")).engines[0].engine_args["enforce_eager"] is False
    old = plan(vl, PlanRequest(cann_version="8.2.RC1"))
    eager = old.engines[0].engine_args
    assert eager["enforce_eager"] is True and "compilation_config" not in eager["extra"]  # type: ignore[operator]
    assert "CANN 8.2.RC1 < 9.0: 310P graph capture (FULL_DECODE_ONLY) needs CANN >= 9.0, so it runs eager" in old.notes
    # Elsewhere: nothing of this (no mask, no CANN).
    cpu = plan(vl, PlanRequest(card="cpu-host", cann_version="8.0.0", dtype="bfloat16"))
    assert not any("mask" in n or "CANN" in n for n in cpu.notes)


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("qwen3-vl-8b-instruct", {"max_model_len": 16384, "cards": 2}),
        ("qwen2.5-vl-7b-instruct", {"images_per_prompt": 4, "visual_tokens_per_image": 512}),
        ("qwen2.5-vl-3b-instruct", {"quantization": "w8a8"}),
        ("qwen3-32b", {"quantization": "w8a8", "cards": 2}),
        ("qwen3-32b", {"card": "nvidia-a100-80g-pcie", "cards": 2}),
    ],
)
def test_engine_args_validate_and_follow_310p_rules(name: str, kw: dict) -> None:
    p = plan(shape(name), PlanRequest(**kw), model_path="/models/x")
    for e in p.engines:
        ec = EngineConfig.model_validate({**e.engine_args, "model": "/models/x"})
        assert json.loads(e.env["VLBATCH_ENGINE"]) == e.engine_args
        assert ec.max_num_seqs in ec.extra["compilation_config"]["cudagraph_capture_sizes"]
        if isinstance(p.platform, Ascend310PPlatform):
            assert ec.dtype == "float16"
            assert 0.85 <= ec.gpu_memory_utilization <= 0.88
            assert e.env["ASCEND_RT_VISIBLE_DEVICES"] == ",".join(map(str, e.device_ids))
        else:
            assert e.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, e.device_ids))
        assert ec.max_num_batched_tokens is not None and ec.max_num_batched_tokens >= p.request.prompt_tokens


def test_rooflines_against_hand_arithmetic() -> None:
    s = shape("qwen3-vl-8b-instruct")
    p = plan(s, PlanRequest(max_model_len=16384))
    chip = get_card("atlas-300i-duo").chip
    text_bytes = 2 * s.text.params
    ctx = 256 + 1024 + 128  # prompt + half the output
    single = 204e9 / (text_bytes + ctx * 147456)
    assert p.roofline.decode_tokens_s_single == pytest.approx(single, rel=0.01)
    # Prefill: 2 x params FLOPs per token at 70 TFLOPS, minus the embedding lookup, plus attention: within 10%.
    assert p.roofline.prefill_tokens_s == pytest.approx(70e12 / (2 * s.text.params), rel=0.10)
    assert p.roofline.decode_bound_by == "memory bandwidth"
    assert p.roofline.decode_tokens_s_batched > 10 * p.roofline.decode_tokens_s_single
    assert p.roofline.items_per_hour_estimate == pytest.approx(0.5 * p.roofline.items_per_hour)
    assert chip.fp16_tflops.value == 70


def test_text_model_ignores_images_with_a_note() -> None:
    p = plan(shape("qwen3-4b"), PlanRequest(images_per_prompt=2))
    assert p.request.images_per_prompt == 0
    assert any("no vision tower" in n for n in p.notes)
    assert p.engines[0].engine_args["limit_images_per_prompt"] == 0


# ---- bad input --------------------------------------------------------------------------------------------------


def test_missing_fields_are_named() -> None:
    raw = cfg("qwen3-32b")
    del raw["hidden_size"], raw["vocab_size"]
    with pytest.raises(ModelConfigError, match="hidden_size, vocab_size"):
        shape_from_dict(raw)
    raw = cfg("qwen3-vl-8b-instruct")
    del raw["text_config"]
    with pytest.raises(ModelConfigError, match="lacks"):
        shape_from_dict(raw)
    moe = {**cfg("qwen3-32b"), "num_experts": 128}
    with pytest.raises(ModelConfigError, match="mixture-of-experts"):
        shape_from_dict(moe)


def test_request_cross_check_names_both_values() -> None:
    with pytest.raises(ValueError, match=r"needs 5632 tokens.*max_model_len=4096"):
        PlanRequest(images_per_prompt=5, max_model_len=4096)


def test_run_plan_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"architectures": ["X"], "num_hidden_layers": 2}))
    err, out = io.StringIO(), io.StringIO()
    assert run_plan(bad, out=out, err=err) == 2
    assert err.getvalue().count("\n") == 1 and "hidden_size" in err.getvalue() and not out.getvalue()
    err = io.StringIO()
    assert run_plan(tmp_path / "nope", out=out, err=err, images_per_prompt=0) == 2
    assert "no such file" in err.getvalue()
    err = io.StringIO()
    assert run_plan(CONFIGS / "qwen3-32b.json", out=out, err=err, card="atlas-300i-pro", images_per_prompt=0) == 2
    assert "Would fit" in err.getvalue()
    err = io.StringIO()
    assert run_plan(CONFIGS / "qwen3-4b.json", out=out, err=err, max_model_len=10) == 2
    assert "max_model_len" in err.getvalue()


def test_cli_plan_command() -> None:
    from cli.main import app

    runner = CliRunner()
    ok = runner.invoke(app, ["plan", str(CONFIGS / "qwen3-vl-8b-instruct.json"), "--max-model-len", "16384"])
    assert ok.exit_code == 0, ok.output
    assert "2 engines x TP1" in ok.output and "ASCEND_RT_VISIBLE_DEVICES=1" in ok.output
    bad = runner.invoke(app, ["plan", str(CONFIGS / "qwen3-32b.json"), "--quant", "w4a8"])
    assert bad.exit_code == 2
    assert "Traceback" not in bad.output
    ids = runner.invoke(app, ["plan", str(CONFIGS / "qwen3-4b.json"), "--device-ids", "0,x"])
    assert ids.exit_code == 2


def test_compose_block_mounts_only_each_engines_chips() -> None:
    p = plan(shape("qwen3-vl-8b-instruct"), PlanRequest(cards=2, device_ids=[0, 1, 4, 5], max_model_len=16384))
    doc = yaml.safe_load(render_compose(p))
    workers = {k: v for k, v in doc["services"].items() if k.startswith("worker-")}
    assert len(workers) == 4
    seen: set[str] = set()
    for svc in workers.values():
        nodes = [d for d in svc["devices"] if d.startswith("/dev/davinci") and d[len("/dev/davinci") :].isdigit()]
        assert len(nodes) == 1 and nodes[0] not in seen
        seen.add(nodes[0])
        assert nodes[0] == f"/dev/davinci{svc['environment']['ASCEND_RT_VISIBLE_DEVICES']}"
        EngineConfig.model_validate(
            {**json.loads(svc["environment"]["VLBATCH_ENGINE"]), "model": svc["environment"]["VLBATCH_MODEL_PATH"]}
        )
    assert "Memory per rank" in render_text(p)


def _description(layers: int, float_down_from: int) -> dict[str, str]:
    """A ModelSlim-style description: every linear W8A8 except down_proj from layer ``float_down_from`` on (the
    posted msit sample for vllm-ascend #633 keeps down_proj FLOAT in its last layers)."""
    d: dict[str, str] = {"model_quant_type": "W8A8", "model.embed_tokens.weight": "FLOAT"}
    for i in range(layers):
        for lin in ("q_proj", "k_proj", "v_proj", "o_proj"):
            d[f"model.layers.{i}.self_attn.{lin}.weight"] = "W8A8"
            d[f"model.layers.{i}.self_attn.{lin}.deq_scale"] = "W8A8"
        for lin in ("gate_proj", "up_proj"):
            d[f"model.layers.{i}.mlp.{lin}.weight"] = "W8A8"
        d[f"model.layers.{i}.mlp.down_proj.weight"] = "FLOAT" if i >= float_down_from else "W8A8"
    return d


def test_quant_description_float_layers_cost_fp16_bytes(tmp_path: Path) -> None:
    s = shape("qwen3-32b")
    all_int8 = plan(s, PlanRequest(quantization="w8a8", cards=2, images_per_prompt=0))
    desc = _description(64, float_down_from=48)
    mixed = plan(s, PlanRequest(quantization="w8a8", cards=2, images_per_prompt=0), quant_description=desc)
    # 16 layers keep down_proj (25600 x 5120) in fp16: one extra byte per weight, minus the 20-byte channel scales.
    extra = 16 * (25600 * 5120 - 20 * 5120)
    assert mixed.weight_bytes_total - all_int8.weight_bytes_total == extra
    assert mixed.kv_tokens < all_int8.kv_tokens
    assert any("448 of 448" not in n and "kept FLOAT" in n for n in mixed.notes)
    # run_plan finds the file next to config.json, and refuses to plan the checkpoint as fp16.
    (tmp_path / "config.json").write_text(json.dumps(cfg("qwen3-32b")))
    (tmp_path / "quant_model_description.json").write_text(json.dumps(desc))
    out, err = io.StringIO(), io.StringIO()
    assert run_plan(tmp_path, out=out, err=err, images_per_prompt=0) == 2
    assert "--quant w8a8" in err.getvalue()
    assert run_plan(tmp_path, out=out, err=io.StringIO(), images_per_prompt=0, quantization="w8a8", cards=2) == 0
    assert "kept FLOAT" in out.getvalue()
