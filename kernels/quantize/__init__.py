"""Offline W8A8 quantization of a Hugging Face model on an ordinary CPU server (``vlbatch quantize``).

``plan`` reads the checkpoint and decides what stays float; ``calibrate`` runs the float model on a few
prompts and images; ``layers`` builds the W8A8 tensors with the reference kernels; ``export`` writes the
vllm-ascend (310P) and compressed-tensors (vLLM CPU) checkpoints; ``evaluate`` measures the error;
``run`` ties them together and writes atomically. transformers is imported only inside functions.
"""

from kernels.quantize.plan import DEFAULT_PROMPTS, QuantizeOptions
from kernels.quantize.run import QuantizeReport, quantize_model

__all__ = ["DEFAULT_PROMPTS", "QuantizeOptions", "QuantizeReport", "quantize_model"]
