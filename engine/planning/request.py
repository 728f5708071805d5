"""What ``vlbatch plan`` plans for: the model's use (context, images, tokens, quantization) and the device set."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Quantization = Literal["fp16", "w8a8", "w4a8"]


class PlanRequest(BaseModel):
    """What to plan for. Every field has a default and a constraint."""

    model_config = ConfigDict(extra="forbid")

    card: str = Field("atlas-300i-duo", description="Card model (engine/device_specs.json 'cards').")
    cards: int = Field(1, ge=1, le=64, description="Cards on the host.")
    device_ids: list[int] | None = Field(
        None, description="Device ids to use (npu-smi Device column), often non-contiguous like 0,1,4,5."
    )
    quantization: Quantization = Field("fp16", description="Weights: fp16, W8A8 (int8 w+a) or W4A8.")
    max_model_len: int = Field(8192, ge=128, le=1_048_576, description="Context length per sequence.")
    visual_tokens_per_image: int = Field(1024, ge=0, le=65536, description="LLM tokens per image after merging.")
    images_per_prompt: int = Field(1, ge=0, le=64, description="Images in one prompt (0 for text jobs).")
    prompt_text_tokens: int = Field(256, ge=1, le=1_048_576, description="Text tokens of one prompt.")
    output_tokens: int = Field(256, ge=1, le=1_048_576, description="Generated tokens per item.")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=0.95, description="Default from the platform: 0.86 on 310P (0.85-0.88 allowed), 0.90 elsewhere."
    )
    max_num_seqs: int | None = Field(None, ge=1, le=1024, description="Force the engine's batch size.")
    tensor_parallel_size: int | None = Field(None, ge=1, le=16, description="Force TP; default smallest that fits.")
    accounting: Literal["halved", "legacy"] = Field(
        "halved", description="310P KV accounting: halved (vllm-ascend >= 0.18) or legacy (<= 0.17)."
    )
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field(
        "auto", description="Engine dtype; auto takes the platform's (float16 on 310P, which refuses bf16 VLMs)."
    )
    cann_version: str | None = Field(
        None,
        max_length=32,
        description="CANN on the Ascend host (`vlbatch doctor` prints it); below 9.0 the 310P plan runs eager.",
    )
    efficiency: float = Field(0.5, gt=0, le=1, description="Assumed fraction of the roofline reached in practice.")
    block_size: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="KV block size in tokens; default from the platform (128 on Ascend, 16 on CUDA).",
    )
    min_concurrent_items: int = Field(
        4, ge=1, le=1024, description="TP grows until one engine's KV cache holds this many whole items."
    )

    @property
    def prompt_tokens(self) -> int:
        return self.prompt_text_tokens + self.images_per_prompt * self.visual_tokens_per_image

    @property
    def seq_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    @model_validator(mode="after")
    def _fits_context(self) -> PlanRequest:
        if self.seq_tokens > self.max_model_len:
            raise ValueError(
                f"one item needs {self.seq_tokens} tokens ({self.prompt_text_tokens} text + {self.images_per_prompt}"
                f" x {self.visual_tokens_per_image} visual + {self.output_tokens} output) but "
                f"max_model_len={self.max_model_len}"
            )
        return self
