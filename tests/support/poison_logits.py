"""A logits processor that kills the vLLM engine core process it runs in as soon as any request joins the batch: a
deployment broken for every item (as vllm-ascend #12086 is for every image on 310P), for
tests/e2e/test_broken_engine.py.

vLLM builds it inside the engine core process (``logits_processors`` engine argument, by qualified name:
``tests.support.poison_logits:KillOnEveryRequest``; nothing else imports this module, which imports vLLM), and
calls ``update_state`` with the requests newly added to the batch before each forward pass. An item that kills the
engine every time is the stub engine's poison (engine/runtime/stub.py, tests/e2e/test_poison_item.py): what the
feeder does about it does not depend on how the engine died.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor


class KillOnEveryRequest(LogitsProcessor):
    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        pass

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return logits

    def is_argmax_invariant(self) -> bool:
        return True  # it never changes the logits

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is not None and batch_update.added:
            # Dies as a segfaulting kernel would: no exception, no cleanup.
            os.kill(os.getpid(), signal.SIGKILL)
