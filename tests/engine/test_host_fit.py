"""The engine arguments a host starts a model with (``engine.planning.host_fit``): the model's own context, a CPU
host's KV cache from the model within a share of the free memory, and one line with a code for what cannot start.
Pure arithmetic on config.json files written here and on memory figures given as the issue's host had them
(23.54 GiB of RAM, 19.05 GiB available): nothing is loaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.planning.context import model_context
from engine.planning.host_fit import HostFitError, HostMemory, engine_for_host, fit_engine
from vlbatch.errors import CONTEXT_OVER_MODEL, KV_CACHE_OVER_MEMORY, KV_CACHE_TOO_SMALL, VlbatchError
from vlbatch.settings import Settings

GiB = 1024**3
ISSUE_HOST = HostMemory(total=int(23.54 * GiB), available=int(19.05 * GiB))
# The shipped tiny tagger's text shapes: 2 layers, 2 KV heads of 64: 2 * 2 * 2 * 64 * 4 = 2048 bytes a token in fp32.
TINY_TEXT = {
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 256,
    "vocab_size": 640,
}
PER_TOKEN_FP32 = 2048


def model(tmp_path: Path, name: str = "m", *, tokenizer: dict[str, Any] | None = None, **cfg: Any) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    cfg = {"model_type": "qwen2", "torch_dtype": "float32", **TINY_TEXT, **cfg}
    (folder / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    if tokenizer is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    return folder


def fit(engine: dict[str, object], folder: Path, memory: HostMemory | None = ISSUE_HOST) -> dict[str, object]:
    return fit_engine(engine, folder, memory=memory, share=0.25)


def refusal(engine: dict[str, object], folder: Path, memory: HostMemory | None = ISSUE_HOST) -> VlbatchError:
    with pytest.raises(HostFitError) as info:
        fit(engine, folder, memory)
    assert "\n" not in info.value.message  # one line
    return info.value


# The model's own context, as vLLM derives it.


def test_the_context_is_the_text_configs_max_position_embeddings(tmp_path: Path) -> None:
    vl = tmp_path / "vl"
    vl.mkdir()
    text = {**TINY_TEXT, "max_position_embeddings": 8192}
    (vl / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "text_config": text}))
    got = model_context(vl)
    assert got.tokens == 8192 and got.source == f"max_position_embeddings in {vl / 'config.json'}"


def test_the_smallest_length_key_the_tokenizers_limit_and_a_rope_factor(tmp_path: Path) -> None:
    assert model_context(model(tmp_path, "a", max_position_embeddings=4096, seq_length=2048)).tokens == 2048
    small_tokenizer = model(tmp_path, "b", max_position_embeddings=4096, tokenizer={"model_max_length": 1024})
    assert model_context(small_tokenizer).tokens == 1024
    huge_tokenizer = model(tmp_path, "c", max_position_embeddings=4096, tokenizer={"model_max_length": 10**30})
    assert model_context(huge_tokenizer).tokens == 4096
    linear = model(tmp_path, "d", max_position_embeddings=4096, rope_scaling={"rope_type": "linear", "factor": 2.0})
    assert model_context(linear).tokens == 8192
    yarn = model(tmp_path, "e", max_position_embeddings=4096, rope_scaling={"type": "yarn", "factor": 4.0})
    assert model_context(yarn).tokens == 4096  # YaRN's length is scaled already
    assert model_context(model(tmp_path, "f")).tokens == 2048  # no length key: vLLM assumes 2048


# On a CPU host.


def test_nothing_set_gives_the_models_context_and_a_kv_cache_from_the_model(tmp_path: Path) -> None:
    got = fit({}, model(tmp_path, max_position_embeddings=4096, torch_dtype="float32"))
    assert got["max_model_len"] == 4096 and got["dtype"] == "float32"
    assert got["kv_cache_memory_bytes"] == PER_TOKEN_FP32 * 4096 * 64  # max_num_seqs full sequences: 512 MiB
    assert int(str(got["kv_cache_memory_bytes"])) < 0.25 * ISSUE_HOST.available  # not 85 % of RAM


def test_a_half_precision_model_keeps_vllms_dtype_and_half_the_bytes(tmp_path: Path) -> None:
    got = fit({"max_num_seqs": 4}, model(tmp_path, max_position_embeddings=4096, torch_dtype="bfloat16"))
    assert "dtype" not in got
    assert "dtype" not in fit({}, model(tmp_path, "unstated", max_position_embeddings=4096, torch_dtype=None))
    assert got["kv_cache_memory_bytes"] == PER_TOKEN_FP32 // 2 * 4096 * 4


def test_a_long_context_is_lowered_to_what_the_share_of_free_memory_holds(tmp_path: Path) -> None:
    folder = model(tmp_path, max_position_embeddings=10**9, torch_dtype="float32")
    got = fit({}, folder)
    budget = int(ISSUE_HOST.available * 0.25)
    assert got["max_model_len"] == budget // PER_TOKEN_FP32 // 16 * 16
    assert int(str(got["kv_cache_memory_bytes"])) <= budget


def test_the_operators_sizes_are_kept_when_they_fit(tmp_path: Path) -> None:
    folder = model(tmp_path, max_position_embeddings=4096)
    fitted = {"max_model_len": 4096, "dtype": "float32"}
    assert fit({"kv_cache_memory_bytes": 64 << 20}, folder) == {"kv_cache_memory_bytes": 64 << 20, **fitted}
    assert fit({"gpu_memory_utilization": 0.5}, folder) == {"gpu_memory_utilization": 0.5, **fitted}
    small = fit({"kv_cache_memory_bytes": 2 << 20}, folder)  # 2 MiB hold 1024 tokens: the default is lowered to it
    assert small["max_model_len"] == 1024


def test_the_readmes_context_is_refused_naming_both_values(tmp_path: Path) -> None:
    folder = model(tmp_path, max_position_embeddings=4096)
    e = refusal({"dtype": "float16", "max_model_len": 16384, "gpu_memory_utilization": 0.86}, folder)
    assert e.code == CONTEXT_OVER_MODEL
    assert "max_model_len 16384 is above the model's own context, 4096" in e.message
    assert "max_position_embeddings in" in e.message


def test_vllms_share_of_all_ram_over_the_free_memory_is_refused(tmp_path: Path) -> None:
    e = refusal({"gpu_memory_utilization": 0.85}, model(tmp_path, max_position_embeddings=4096))
    assert e.code == KV_CACHE_OVER_MEMORY
    assert "gpu_memory_utilization 0.85 of this host's 23.54 GiB is 20.01 GiB, more than the 19.05 GiB" in e.message
    assert "lower it to 0.72 or less" in e.message
    fit({"gpu_memory_utilization": 0.72}, model(tmp_path, "b", max_position_embeddings=4096))  # the advice works


def test_a_kv_cache_over_the_free_memory_or_under_one_sequence_is_refused(tmp_path: Path) -> None:
    folder = model(tmp_path, max_position_embeddings=4096)
    over = refusal({"kv_cache_memory_bytes": 20 * GiB}, folder)
    assert over.code == KV_CACHE_OVER_MEMORY and "more than the 19.05 GiB of memory available" in over.message
    under = refusal({"kv_cache_memory_bytes": 2_000_000, "max_model_len": 4096}, folder)
    assert under.code == KV_CACHE_TOO_SMALL
    assert f"give it {4096 * PER_TOKEN_FP32} bytes or more, or lower max_model_len to 976" in under.message
    fit({"kv_cache_memory_bytes": 2_000_000, "max_model_len": 976}, folder)  # the advice works
    tiny = refusal({"kv_cache_memory_bytes": 1 << 20, "max_num_seqs": 1}, model(tmp_path, "big", num_hidden_layers=200))
    assert tiny.code == KV_CACHE_TOO_SMALL and "max_model_len 128" in tiny.message and "lower" not in tiny.message


def test_one_sequence_over_the_free_memory_is_refused(tmp_path: Path) -> None:
    folder = model(tmp_path, max_position_embeddings=10**8, torch_dtype="float32")
    e = refusal({"max_model_len": 10**7}, folder)
    assert e.code == KV_CACHE_OVER_MEMORY
    assert "one sequence of max_model_len 10000000 needs 19.07 GiB of KV cache" in e.message
    tight = HostMemory(total=GiB, available=100 * PER_TOKEN_FP32)  # the share holds 25 tokens, fewer than 128
    assert refusal({}, folder, tight).code == KV_CACHE_OVER_MEMORY


# On an accelerator, and through the settings.


def test_an_accelerator_gets_the_context_only(tmp_path: Path) -> None:
    assert fit({}, model(tmp_path, "long", max_position_embeddings=262144), None) == {"max_model_len": 4096}
    assert fit({}, model(tmp_path, "short", max_position_embeddings=2048), None) == {"max_model_len": 2048}
    assert refusal({"max_model_len": 4096}, model(tmp_path, "s2", max_position_embeddings=2048), None).code == (
        CONTEXT_OVER_MODEL
    )


def test_engine_for_host_on_this_cpu_host_and_on_no_model(tmp_path: Path) -> None:
    folder = model(tmp_path, max_position_embeddings=4096, torch_dtype="float32")
    got = engine_for_host(Settings(platform="cpu", engine={"max_num_seqs": 8}), folder).runtime.engine
    assert got == {
        "max_num_seqs": 8,
        "max_model_len": 4096,
        "dtype": "float32",
        "kv_cache_memory_bytes": PER_TOKEN_FP32 * 4096 * 8,
    }
    results = tmp_path / "results.jsonl"  # eval --compare takes a results export as a side
    results.write_text("")
    assert engine_for_host(Settings(platform="cpu"), results).runtime.engine == {}


def test_values_given_as_text_are_checked_as_the_engine_reads_them(tmp_path: Path) -> None:
    folder = model(tmp_path, max_position_embeddings=4096)
    assert refusal({"max_model_len": "16384"}, folder).code == CONTEXT_OVER_MODEL
    assert refusal({"kv_cache_memory_bytes": str(20 * GiB)}, folder).code == KV_CACHE_OVER_MEMORY
