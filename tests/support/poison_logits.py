"""A logits processor that kills the vLLM engine core process it runs in when a request with the poison seed
joins the batch: an item that crashes the real engine every time it runs, for tests/e2e/test_poison_item_engine.py.
``KillOnEveryRequest`` kills it on any request: a deployment broken for every item, for
tests/e2e/test_broken_engine.py.

vLLM builds it inside the engine core process (``logits_processors`` engine argument, by qualified name), and
calls ``update_state`` with the requests newly added to the batch before each forward pass; the seed of a
request's sampling parameters is the item's own (a completions line's ``seed``), so exactly one item carries it.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

POISON_SEED = 977_531  # the seed that marks the poisoned request
QUALNAME = f"{__name__}:KillOnPoisonSeed"
EVERY_REQUEST_QUALNAME = f"{__name__}:KillOnEveryRequest"


class KillOnPoisonSeed(LogitsProcessor):
    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        pass

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return logits

    def is_argmax_invariant(self) -> bool:
        return True  # it never changes the logits

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for _index, params, _prompt, _output in batch_update.added:
            if params.seed == POISON_SEED:
                os.kill(os.getpid(), signal.SIGKILL)  # dies as a segfaulting kernel would: no exception, no cleanup


class KillOnEveryRequest(KillOnPoisonSeed):
    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is not None and batch_update.added:
            os.kill(os.getpid(), signal.SIGKILL)
