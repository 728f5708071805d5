"""The engine canary: after every load, one small request of each kind the worker serves (an image at the planned
visual budget, a text prompt) must come back before anything is claimed.

An engine that crashes or hangs on the canary is broken for every item of that kind (vllm-ascend #12086 on 310P
kills the engine core on any image): claiming would only burn the items. A refusal (the engine says the request
is invalid) is not a crash: the kind is not served, and the canary passes without it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait
from dataclasses import dataclass

from PIL import Image, ImageDraw

from engine.runtime.requests import EngineCrashed, EngineStopped, GenerationRequest
from engine.runtime.runner import EngineRunner
from engine.vision import VisionGeometry
from preprocessing.images import budget_pixels, prepare_image

log = logging.getLogger(__name__)

# The tagging pipeline's default visual budget per image: what the canary's image costs, as a photo does.
CANARY_VISUAL_TOKENS = 256
SYSTEM = "You are a test of the serving engine."
IMAGE_PROMPT = "Name one colour in the image."
TEXT_PROMPT = "Say OK."


@dataclass(frozen=True)
class CanaryResult:
    ok: bool
    reason: str | None = None  # what crashed or hung, for the log, /readyz and the job's ``stalled``
    seconds: float = 0.0


def canary_image(geometry: VisionGeometry, *, visual_tokens: int = CANARY_VISUAL_TOKENS) -> Image.Image:
    """A small picture (coloured blocks on a light ground), resized to the budget's grid as an item's is."""
    img = Image.new("RGB", (640, 480), (200, 210, 220))
    draw = ImageDraw.Draw(img)
    draw.rectangle((80, 60, 300, 260), fill=(200, 40, 40))
    draw.ellipse((340, 180, 580, 420), fill=(40, 90, 200))
    max_px = min(
        budget_pixels(visual_tokens, patch_size=geometry.patch_size, merge_size=geometry.merge_size),
        geometry.max_pixels,
    )
    return prepare_image(img, factor=geometry.factor, min_pixels=min(max_px, geometry.min_pixels), max_pixels=max_px)


def canary_requests(
    render: Callable[[str, str, int], str], geometry: VisionGeometry, *, images: bool, tag: str
) -> list[GenerationRequest]:
    """The canary's requests: a text prompt, and an image one when the engine takes images. ``render`` is the
    served model's chat template (system, user, images); ``tag`` makes the request ids unique per run."""
    reqs = [GenerationRequest(request_id=f"canary-{tag}-text", prompt=render(SYSTEM, TEXT_PROMPT, 0), max_tokens=4)]
    if images:
        reqs.insert(
            0,
            GenerationRequest(
                request_id=f"canary-{tag}-image",
                prompt=render(SYSTEM, IMAGE_PROMPT, 1),
                images=[canary_image(geometry)],
                max_tokens=4,
            ),
        )
    return reqs


def run_canary(runner: EngineRunner, requests: list[GenerationRequest], *, timeout_s: float) -> CanaryResult:
    """Send ``requests`` to the loaded engine and wait for every answer: a crash or no answer in ``timeout_s`` fails."""
    started = time.monotonic()
    futures = runner.submit(requests)
    done, _ = wait(futures, timeout=timeout_s)
    seconds = time.monotonic() - started
    for req, fut in zip(requests, futures, strict=True):
        kind = "an image" if req.images else "a text"
        if fut not in done:
            return CanaryResult(False, f"hangs on {kind} request (no answer in {timeout_s:.0f} s)", seconds)
        try:
            fut.result(0)
        except (EngineCrashed, EngineStopped) as exc:
            return CanaryResult(False, f"crashes on {kind} request ({exc})", seconds)
        except FutureTimeout:  # pragma: no cover - done futures do not time out
            return CanaryResult(False, f"hangs on {kind} request", seconds)
        except Exception as exc:  # refused: the engine does not take this kind, which is not a crash
            log.warning("canary: the engine refused %s request (%s); that kind is not served", kind, exc)
    return CanaryResult(True, None, seconds)


def crash_remedies(platform: str | None, *, npu_smi: str = "npu-smi") -> list[str]:
    """The known remedies of the platform this process runs on (``engine.platforms``), or none when it is unknown."""
    from engine import platforms

    try:
        return platforms.current_platform(platform, npu_smi=npu_smi).crash_remedies()
    except Exception:  # naming remedies must never hide the failure it explains
        log.debug("no platform for crash remedies", exc_info=True)
        return []
