"""The 310P multimodal-merge fix inside the real CPU engine, on the run's shared engine (no load of its own).

The plugin runs in the engine's worker process, where vLLM loaded it through its ``vllm.general_plugins`` entry
point; the runner reaches it there through the worker extension (``collective_rpc``), which switches it between
vLLM's own merge and the index merge at run time. The same greedy requests over a few photos and a clip answer the
same with either, and the index merges counted in that process, under that process's pid (not this one's), show the
fix ran inside the engine and not only here.
"""

from __future__ import annotations

import os

import pytest
from PIL import Image, ImageDraw

from engine.runtime.requests import GenerationRequest
from engine.runtime.runner import EngineRunner
from worker.image_prep import video_clip

pytestmark = [pytest.mark.engine("shared"), pytest.mark.timeout(900)]

IMAGE = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe.<|im_end|>\n<|im_start|>assistant\n"
TWO_IMAGES = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|image_pad|><|vision_end|>"
    "Compare.<|im_end|>\n<|im_start|>assistant\n"
)
VIDEO = "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>What happens?<|im_end|>\n<|im_start|>assistant\n"


def _photo(size: tuple[int, int], colour: tuple[int, int, int], mark: int) -> Image.Image:
    image = Image.new("RGB", size, colour)
    ImageDraw.Draw(image).rectangle((mark, mark, mark + 20, mark + 12), fill=(255 - colour[0], 40, 200))
    return image


def _requests(tag: str) -> list[GenerationRequest]:
    photos = [_photo((96, 64), (200, 120, 40), 5), _photo((64, 96), (30, 90, 160), 20), _photo((80, 80), (0, 0, 0), 9)]
    frames = [_photo((112, 84), ((k * 70) % 256, 130, 255 - k * 60), 4 * k) for k in range(4)]
    greedy = {"max_tokens": 12, "temperature": 0.0}
    return [
        *(
            GenerationRequest(request_id=f"{tag}-photo-{i}", prompt=IMAGE, images=[p], **greedy)
            for i, p in enumerate(photos)
        ),
        GenerationRequest(request_id=f"{tag}-pair", prompt=TWO_IMAGES, images=photos[:2], **greedy),
        GenerationRequest(
            request_id=f"{tag}-clip", prompt=VIDEO, videos=[video_clip(frames, [0.0, 0.5, 1.0, 1.5])], **greedy
        ),
    ]


def _answers(runner: EngineRunner, tag: str) -> list[tuple[str, int]]:
    results = [f.result(timeout=600) for f in runner.submit(_requests(tag))]
    assert all(r.completion_tokens > 0 for r in results)
    return [(r.text, r.prompt_tokens) for r in results]


def test_index_merge_answers_as_vllms_own_inside_the_engine_process(shared_engine: EngineRunner) -> None:
    before = shared_engine.mm_merge()
    # vLLM loaded the entry point in the engine's worker, a process of its own; on this CPU host auto left it alone.
    assert before.registered, before
    assert before.pid != os.getpid()
    assert before.mode == "auto" and not before.applied and before.why == "auto: the CPU platform needs no fix"
    assert shared_engine.mm_merge_state is not None and not shared_engine.mm_merge_state.applied  # the start-up line's
    try:
        off = shared_engine.mm_merge("off")
        assert not off.applied and off.pid == before.pid
        own = _answers(shared_engine, "own")

        index = shared_engine.mm_merge("index")
        assert index.applied and index.pid == before.pid
        assert "vllm.model_executor.models.utils._merge_multimodal_embeddings" in index.rebound
        calls = index.calls
        patched = _answers(shared_engine, "index")
        after = shared_engine.mm_merge()
    finally:
        restored = shared_engine.mm_merge("auto")
    assert patched == own
    # Every request carries images or a clip and the prefix cache was dropped with the switch: each prefill merged.
    assert after.calls > calls, after
    assert not restored.applied
