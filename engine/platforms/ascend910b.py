"""Ascend 910B (Atlas 800T A2 servers, Atlas 300I A2 cards) under vllm-ascend.

Code here may assume what :mod:`engine.platforms.ascend` assumes. A 910B NPU id is one chip, its npu-smi
table has no Device column (the logical ids come from ``npu-smi info -m``), it has bf16 and W8A8/W4A8, and
HCCS links the eight NPUs of a server. No software stack is pinned for it here: the doctor reports versions.
"""

from __future__ import annotations

from engine.platforms.ascend import AscendPlatform


class Ascend910BPlatform(AscendPlatform):
    name = "ascend-910b"
    kubernetes_resource = "huawei.com/Ascend910"  # the Ascend device plugin's name for 910-series chips
    family = "910B"
    chip_marker = "910B"
    # Idle 910B3 chips report ~3.4 GB of HBM used (tests/engine/fixtures/npu_smi/info_910b3_*_idle.txt).
    busy_mb = 6144
    supported_dtypes = ("auto", "float16", "bfloat16")
    memory_utilization_default = 0.90
    max_num_seqs_cap = 256
