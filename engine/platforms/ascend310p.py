"""Ascend 310P (Atlas 300I Duo: two 310P3 chips per card; Atlas 300I Pro: one) under vllm-ascend.

Code here may assume what :mod:`engine.platforms.ascend` assumes, plus these 310P facts, each from the source
named beside it: float16 only (no bf16); gpu_memory_utilization 0.85-0.88; the KV-cache accounting of
vllm-ascend's 310P worker; a max_model_len^2 attention mask; few graph sizes under tensor parallel; W8A8 only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine import devices
from engine.platforms import ascend_host, ascend_matrix
from engine.platforms.ascend import AscendPlatform
from engine.platforms.interface import PlatformRefusal
from engine.platforms.reports import Check, DoctorContext, Inventory

if TYPE_CHECKING:
    from engine.planning.shapes import ModelShape

# vllm-ascend's 300I DUO support matrix: Qwen3-VL is listed with max-model-len 16k.
QWEN3_VL_MAX_LEN = 16384


class Ascend310PPlatform(AscendPlatform):
    name = "ascend-310p"
    family = "310P"
    chip_marker = "310P"
    # Ascend device plugin (mindcluster ascend-device-plugin): one unit is one chip, so a 300I Duo card is two.
    kubernetes_resource = "huawei.com/Ascend310P"
    stack = ascend_matrix.ATLAS_300I_DUO
    # Idle 310P3 chips report 1.1-1.9 GB used (driver reserve); more than this means someone holds the chip.
    busy_mb = 4096
    supported_dtypes = ("float16",)
    # gpu_memory_utilization 0.9 OOMs during KV allocation in posted logs; the deployment docs' range is 0.85-0.88.
    memory_utilization_default = 0.86
    memory_utilization_range = (0.85, 0.88)
    memory_utilization_why = (
        "at 0.9 and above the 310P KV allocation fails with EL0004 'Failed to allocate memory'"
        " (vllm-ascend issues #3316, #3479)"
    )
    # 310P tutorials run 16-128 sequences: larger batches hit graph-capture and workspace limits first.
    max_num_seqs_cap = 128
    quantization_note = "vllm-ascend's 310P path implements W8A8 variants only"

    def attention_mask_bytes(self, max_model_len: int) -> int:
        # The 310P attention keeps a max_model_len^2 fp16 causal mask built from a bool one (3 bytes per cell):
        # the reason its docs say never to leave max_model_len to auto-detection.
        return 3 * max_model_len**2

    def kv_cache_halved(self, accounting: str) -> bool:
        # vllm-ascend's 310P worker (vllm_ascend/_310p/worker_310p.py, determine_available_memory, since v0.18.0)
        # halves what is left "for workspace"; releases up to v0.17 (worker_v1.py) did not ("legacy").
        return accounting == "halved"

    def kv_accounting(self, accounting: str) -> str:
        if self.kv_cache_halved(accounting):
            return "(util x total - weights - activation - non-torch) / 2, vllm-ascend >= 0.18 310P worker"
        return super().kv_accounting(accounting)

    def check_dtype(self, shape: ModelShape, requested: str) -> None:
        if requested == "bfloat16" and shape.vision is not None:
            # vllm-ascend's 300I DUO support matrix lists its VLMs with dtype float16 only: the 310P has no bf16
            # arithmetic, and its vision kernels are fp16 ones.
            raise PlatformRefusal(
                f"dtype bfloat16 for {shape.name} on 310P: vllm-ascend runs vision-language models on 300I Duo in"
                " float16 only (its support matrix); set dtype float16 (a bf16 checkpoint is cast at load)"
            )
        super().check_dtype(shape, requested)

    def eager_reason(self, cann_version: str | None) -> str | None:
        # vllm-ascend's 310P tutorial: graph capture (cudagraph_mode FULL_DECODE_ONLY, the only mode 310P supports)
        # needs CANN 9.0 or later; before that the engine must run eager.
        if cann_version is None:
            return None
        major = cann_version.split(".", 1)[0]
        if major.isdigit() and int(major) < 9:
            return (
                f"CANN {cann_version} < 9.0: 310P graph capture (FULL_DECODE_ONLY) needs CANN >= 9.0, so it runs eager"
            )
        return None

    def stack_checks(self, ctx: DoctorContext, inv: Inventory | None) -> list[Check]:
        checks = super().stack_checks(ctx, inv)
        mode = ctx.graph_mode
        if mode is None or mode == "eager":
            return checks
        if mode.upper() not in ("FULL_DECODE_ONLY", "NONE"):
            checks.append(
                Check(
                    "fail",
                    f"engine cudagraph_mode is {mode} but 310P captures FULL_DECODE_ONLY only: set it in"
                    " VLBATCH_ENGINE's extra.compilation_config (vlbatch plan writes it) or set enforce_eager",
                )
            )
        cann, _ = ascend_host.cann_version(ctx.toolkit_home, ctx.root)
        eager = self.eager_reason(cann)
        if eager:
            checks.append(
                Check("fail", f'{eager}: set "enforce_eager": true in VLBATCH_ENGINE (vlbatch plan --cann {cann})')
            )
        return checks

    def max_model_len_cap(self, shape: ModelShape) -> tuple[int, str] | None:
        if shape.vision is not None and shape.vision.kind == "qwen3_vl":
            gib = self.attention_mask_bytes(QWEN3_VL_MAX_LEN) / 2**30
            return (
                QWEN3_VL_MAX_LEN,
                f"vllm-ascend supports Qwen3-VL on 300I Duo at most {QWEN3_VL_MAX_LEN} (its support matrix): the 310P"
                " attention builds a full [max_model_len, max_model_len] fp16 mask (from a bool one), already"
                f" {gib:.2f} GiB at {QWEN3_VL_MAX_LEN}; set max_model_len <= {QWEN3_VL_MAX_LEN}",
            )
        return None

    def graph_capture_sizes(self, max_num_seqs: int, tp: int) -> list[int]:
        if tp > 1:
            # 310P with TP > 1 runs out of event ids after a couple of graphs (vllm-ascend 310P tutorial).
            return sorted({max(1, max_num_seqs // 2), max_num_seqs})
        return super().graph_capture_sizes(max_num_seqs, tp)

    def engine_extra(self, *, tp: int, max_num_seqs: int, quantization: str) -> dict[str, object]:
        extra: dict[str, object] = {
            "compilation_config": {
                "cudagraph_mode": "FULL_DECODE_ONLY",
                "cudagraph_capture_sizes": self.graph_capture_sizes(max_num_seqs, tp),
            },
            "additional_config": {"ascend_compilation_config": {"enable_npugraph_ex": False}},
        }
        if quantization != "fp16" and self.quantization_backend:
            extra["quantization"] = self.quantization_backend
        return extra

    def layout_notes(self, card: devices.Card, tp: int) -> list[str]:
        if tp > 1 and card.chips_per_card > 1:
            return [
                "TP groups are consecutive device ids; keep both chips of one card in a group (npu-smi info -m"
                " shows which ids share a card). Tensor-parallel all-reduces go over PCIe, which the rooflines"
                " ignore."
            ]
        return []

    def index_merge_reason(self) -> str | None:
        # vllm-ascend #12086 (open; also seen on Atlas 300I Pro, #4419): the boolean-mask index_put_ in vLLM's
        # _merge_multimodal_embeddings dispatches to the 310P's faulty aicpu IndexPut kernel (Ascend/pytorch #153).
        return "310P: vLLM's boolean-mask merge crashes the engine core on every image (vllm-ascend #12086)"

    def crash_remedies(self) -> list[str]:
        # vllm-ascend #12086 (open; also seen on Atlas 300I Pro): every request with an image kills the engine core
        # with aicpu error 507018. vlbatch's vLLM plugin (engine/platforms/mm_merge.py) replaces the merge on 310P;
        # these remedies are for when it could not (turned off, or the installed vLLM's function changed).
        return [
            "vllm-ascend #12086: on 310P every image request crashes the engine core (aicpu error 507018) from the"
            " boolean-mask assignment in vllm/model_executor/models/utils.py::_merge_multimodal_embeddings. vlbatch's"
            " plugin replaces it with an index_copy_ when VLBATCH_MM_MERGE=auto (the default) or index: check that it"
            " is active with `vlbatch doctor` (the 'multimodal merge' line) and the worker's start-up log. If they say"
            " the fix was refused because the installed vLLM's function changed, install the validated vLLM (the"
            " doctor's stack lines name it) or the vlbatch release that knows the new one, then restart the worker",
            "update the NPU driver and firmware to 25.x or later (vllm-ascend #13050: requests crashing a 310P engine"
            " on older drivers)",
            "text-only jobs still run: serve them from a queue of their own until the image path is fixed",
        ]

    def launch_notes(self) -> list[str]:
        return [
            "graph capture is cudagraph_mode FULL_DECODE_ONLY only and needs CANN >= 9.0; on older CANN plan with"
            " --cann VERSION (the plan then runs eager)"
        ]
