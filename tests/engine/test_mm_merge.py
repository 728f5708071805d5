"""The 310P multimodal-merge fix (engine/platforms/mm_merge.py) without an engine: the index merge against vLLM's own
merge on random inputs, the patching of the installed vLLM (and of the model modules that copied the function by
name), the refusal when vLLM's function is not the one it knows, and the ``auto`` decision through the platform layer
(a CPU host untouched, a simulated 310P patched, no NPU needed)."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from engine.platforms import get_platform, mm_merge
from vlbatch.settings import get_settings

torch = pytest.importorskip("torch")
utils = pytest.importorskip("vllm.model_executor.models.utils")
# Imported before any patching: these bind the function at their top, one of them under another name.
qwen3_vl = importlib.import_module("vllm.model_executor.models.qwen3_vl")
llava_ov2 = importlib.import_module("vllm.model_executor.models.llava_onevision2")

VLLM_MERGE = utils._merge_multimodal_embeddings
assert VLLM_MERGE.__module__ == mm_merge.UTILS_MODULE, "the reference must be vLLM's own merge, not a patched one"


@pytest.fixture(autouse=True)
def unpatched(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts and ends with vLLM's own merge and a fresh plugin state, and reads settings afresh."""
    for k in ("VLBATCH_MM_MERGE", "VLBATCH_PLATFORM", "VLBATCH_NPU_SMI"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("VLBATCH_NPU_SMI", "npu-smi-not-installed")  # detection sees no NPU on any test host
    get_settings.cache_clear()
    yield
    mm_merge.restore()
    mm_merge._state = mm_merge.MergeState()
    get_settings.cache_clear()
    assert utils._merge_multimodal_embeddings is VLLM_MERGE
    assert qwen3_vl._merge_multimodal_embeddings is VLLM_MERGE


def _case(dtype: Any, n_tokens: int, image_lengths: list[int], hidden: int = 24, seed: int = 0) -> tuple[Any, ...]:
    """Prompt embeddings, one embedding tensor per image, and a mask with exactly that many placeholders at random
    positions (images' tokens contiguous, as the processor lays them out)."""
    g = torch.Generator().manual_seed(seed)
    embeds = torch.randn(n_tokens, hidden, generator=g).to(dtype)
    images = [torch.randn(n, hidden, generator=g).to(dtype) for n in image_lengths]
    mask = torch.zeros(n_tokens, dtype=torch.bool)
    free = n_tokens - sum(image_lengths)
    gaps = sorted(torch.randint(0, free + 1, (len(image_lengths),), generator=g).tolist())
    pos, used = 0, 0
    for gap, n in zip(gaps, image_lengths, strict=True):
        pos += gap - used
        used = gap
        mask[pos : pos + n] = True
        pos += n
    assert int(mask.sum()) == sum(image_lengths)
    return embeds, images, mask


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize(
    ("n_tokens", "image_lengths"),
    [
        (40, []),  # no image: nothing merged
        (40, [0]),  # an empty image tensor and an empty mask
        (36, [36]),  # every position an image token (the full mask)
        (50, [7]),
        (200, [16, 4, 33, 9]),  # several images of different lengths
    ],
)
def test_index_merge_equals_vllms_own(dtype: str, n_tokens: int, image_lengths: list[int]) -> None:
    embeds, images, mask = _case(getattr(torch, dtype), n_tokens, image_lengths)
    want = VLLM_MERGE(embeds.clone(), images, mask)
    got_in = embeds.clone()
    got = mm_merge.index_merge(got_in, images, mask)
    assert got is got_in  # in place, as vLLM's
    assert got.dtype == want.dtype
    assert torch.equal(got, want)
    if image_lengths:  # the same rows changed as in vLLM's (not a trivially unchanged tensor)
        assert torch.equal(got[~mask], embeds[~mask])


def test_image_embeddings_of_another_dtype_and_a_non_contiguous_target() -> None:
    """fp32 vision output into fp16 prompt embeddings, and a target that is a strided view: both as vLLM's."""
    embeds, images, mask = _case(torch.float16, 64, [10, 6], hidden=16, seed=3)
    images32 = [t.float() * 1.5 for t in images]
    wide = torch.zeros(64, 32, dtype=torch.float16)
    wide[:, ::2] = embeds
    want = VLLM_MERGE(wide.clone()[:, ::2], images32, mask)
    view = wide.clone()[:, ::2]
    assert not view.is_contiguous()
    got = mm_merge.index_merge(view, images32, mask)
    assert torch.equal(got, want)
    # A batch of images as one 3-D tensor (images x tokens x hidden) flattens as vLLM's does.
    batch = torch.stack([images[1], images[1]])
    _, _, mask12 = _case(torch.float16, 30, [12], hidden=16, seed=4)
    assert torch.equal(
        mm_merge.index_merge(torch.zeros(30, 16, dtype=torch.float16), batch, mask12),
        VLLM_MERGE(torch.zeros(30, 16, dtype=torch.float16), batch, mask12),
    )


def test_mask_on_the_cpu_with_embeddings_elsewhere() -> None:
    """Qwen3-VL's deepstack path hands the mask over on the CPU while the embeddings are on the NPU. This machine has
    no second device; the nearest thing is torch's ``meta`` device (shapes and devices, no data): index_copy_ with
    the CPU indices on meta embeddings is refused, so the merge must move them, and does."""
    embeds = torch.zeros(20, 8, device="meta")
    images = [torch.zeros(5, 8, device="meta")]
    mask = torch.zeros(20, dtype=torch.bool)
    mask[3:8] = True
    with pytest.raises(RuntimeError, match="same device"):
        embeds.index_copy_(0, mask.nonzero().squeeze(1), images[0])
    got = mm_merge.index_merge(embeds, images, mask)
    assert got.device.type == "meta" and tuple(got.shape) == (20, 8)


def test_a_count_mismatch_raises_vllms_error() -> None:
    embeds, images, mask = _case(torch.float32, 30, [4, 3])
    mask[29] = True  # one placeholder more than the images have
    with pytest.raises(ValueError, match=r"Attempted to assign 4 \+ 3 = 7 multimodal tokens to 8 placeholders"):
        VLLM_MERGE(embeds.clone(), images, mask)
    with pytest.raises(ValueError, match=r"Attempted to assign 4 \+ 3 = 7 multimodal tokens to 8 placeholders"):
        mm_merge.index_merge(embeds.clone(), images, mask)


def test_index_mode_patches_utils_and_the_modules_that_copied_it_and_off_puts_them_back() -> None:
    state = mm_merge.set_mode("index")
    assert state.applied and not state.refused
    assert state.function == "vllm.model_executor.models.utils._merge_multimodal_embeddings"
    assert utils._merge_multimodal_embeddings is mm_merge._patched
    # Bound at the top of modules imported before the patch, under its own name and under another.
    assert qwen3_vl._merge_multimodal_embeddings is mm_merge._patched
    assert llava_ov2.merge_multimodal_embeddings is mm_merge._patched
    assert "vllm.model_executor.models.llava_onevision2.merge_multimodal_embeddings" in state.rebound
    # A model module imported while patched copies the patched one from utils.
    sys.modules.pop("vllm.model_executor.models.phi3v", None)
    phi3v = importlib.import_module("vllm.model_executor.models.phi3v")
    assert phi3v._merge_multimodal_embeddings is mm_merge._patched
    # Calls through a model module's own name run the index merge, and are counted.
    embeds, images, mask = _case(torch.float32, 50, [5, 5])
    want = VLLM_MERGE(embeds.clone(), images, mask)
    assert torch.equal(qwen3_vl._merge_multimodal_embeddings(embeds.clone(), images, mask), want)
    assert mm_merge.state().calls == 1

    state = mm_merge.set_mode("off")
    assert not state.applied and state.why == "off: never patched"
    assert utils._merge_multimodal_embeddings is VLLM_MERGE
    assert llava_ov2.merge_multimodal_embeddings is VLLM_MERGE
    assert phi3v._merge_multimodal_embeddings is VLLM_MERGE  # imported while patched: put back too


def test_a_changed_signature_is_refused_with_one_line_and_vllm_is_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    def changed(inputs_embeds: Any, multimodal_embeddings: Any, is_multimodal: Any, *, scale: float = 1.0) -> Any:
        return inputs_embeds

    with pytest.MonkeyPatch.context() as mp:  # undone before the fixture checks vLLM's own is back
        mp.setattr(utils, "_merge_multimodal_embeddings", changed)
        with caplog.at_level(logging.ERROR, logger=mm_merge.__name__):
            state = mm_merge.set_mode("index")
        assert state.refused and not state.applied
        assert utils._merge_multimodal_embeddings is changed
        (record,) = caplog.records
        assert record.getMessage().startswith(
            "vlbatch 310P multimodal-merge fix refused: vllm.model_executor.models.utils._merge_multimodal_embeddings"
            "('inputs_embeds', 'multimodal_embeddings', 'is_multimodal', 'scale') changed"
        )
        assert "VLBATCH_MM_MERGE=off" in record.getMessage()
        # Gone under every name it has had: refused too, naming what was looked for.
        mp.delattr(utils, "_merge_multimodal_embeddings")
        assert mm_merge.find_function(utils) == (
            "vllm.model_executor.models.utils has none of _merge_multimodal_embeddings, merge_multimodal_embeddings"
        )


def test_a_merge_already_replaced_by_someone_else_is_left_to_it() -> None:
    def theirs(inputs_embeds: Any, multimodal_embeddings: Any, is_multimodal: Any) -> Any:
        return inputs_embeds

    theirs.__module__ = "vllm_ascend.patch.platform.patch_mm_merge_310p"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(utils, "_merge_multimodal_embeddings", theirs)
        state = mm_merge.set_mode("index")
        assert not state.applied and "already replaced by vllm_ascend.patch.platform.patch_mm_merge_310p" in state.why
        assert utils._merge_multimodal_embeddings is theirs


def test_auto_on_this_cpu_host_leaves_vllm_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    """What vLLM's plugin loader calls, with the platform detected (no NPU, no GPU here)."""
    monkeypatch.setenv("VLBATCH_MM_MERGE", "auto")
    mm_merge.register()
    state = mm_merge.state()
    assert state.registered and not state.applied and not state.refused
    assert state.why == "auto: the CPU platform needs no fix"
    assert utils._merge_multimodal_embeddings is VLLM_MERGE
    assert qwen3_vl._merge_multimodal_embeddings is VLLM_MERGE
    assert llava_ov2.merge_multimodal_embeddings is VLLM_MERGE


def test_auto_on_a_simulated_310p_applies_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """The platform layer decides (``Platform.index_merge_reason``): VLBATCH_PLATFORM names a 310P, no NPU needed."""
    monkeypatch.setenv("VLBATCH_PLATFORM", "ascend-310p")
    mm_merge.register()
    state = mm_merge.state()
    assert state.applied and "vllm-ascend #12086" in state.why and state.why.startswith("auto: 310P")
    assert utils._merge_multimodal_embeddings is mm_merge._patched
    assert qwen3_vl._merge_multimodal_embeddings is mm_merge._patched
    # off wins even there; index applies everywhere, the CPU included.
    monkeypatch.setenv("VLBATCH_MM_MERGE", "off")
    get_settings.cache_clear()
    mm_merge.register()
    assert not mm_merge.state().applied and utils._merge_multimodal_embeddings is VLLM_MERGE
    assert mm_merge.decide("index", get_platform("cpu")).apply


def test_auto_leaves_the_merge_to_a_vllm_ascend_that_carries_its_own_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert mm_merge.vllm_ascend_fix() is None  # none installed here
    fix = tmp_path / "vllm_ascend" / "patch" / "platform" / "patch_mm_merge_310p.py"
    fix.parent.mkdir(parents=True)
    (tmp_path / "vllm_ascend" / "__init__.py").write_text("")
    fix.write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert mm_merge.vllm_ascend_fix() == "vllm_ascend/patch/platform/patch_mm_merge_310p.py"
    assert "vllm_ascend" not in sys.modules  # found on disk, never imported
    monkeypatch.setenv("VLBATCH_PLATFORM", "ascend-310p")
    mm_merge.register()
    state = mm_merge.state()
    assert not state.applied
    assert (
        state.why
        == "auto: vllm-ascend already carries a fix (vllm_ascend/patch/platform/patch_mm_merge_310p.py); left to it"
    )
    assert utils._merge_multimodal_embeddings is VLLM_MERGE


def test_register_never_raises(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """An exception in a general plugin would stop vLLM's engine from starting: it is logged and vLLM left alone."""
    monkeypatch.setenv("VLBATCH_PLATFORM", "no-such-platform")
    with caplog.at_level(logging.ERROR, logger=mm_merge.__name__):
        mm_merge.register()
    assert not mm_merge.state().applied and mm_merge.state().why.startswith("the plugin failed: KeyError")
    assert utils._merge_multimodal_embeddings is VLLM_MERGE


def test_the_plugin_is_registered_with_vllm() -> None:
    (ep,) = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "vlbatch_mm_merge"]
    assert ep.load() is mm_merge.register
    assert mm_merge.plugin_registered()
    assert mm_merge.installed_function() == ("_merge_multimodal_embeddings", mm_merge.PARAMETERS)


def test_the_worker_extension_switches_and_reports() -> None:
    control = mm_merge.MergeControl()
    report = control.vlbatch_mm_merge("index")
    assert report["applied"] and report["mode"] == "index" and report["pid"] > 0
    assert mm_merge.from_report([control.vlbatch_mm_merge()]).applied
    assert not control.vlbatch_mm_merge("off")["applied"]
