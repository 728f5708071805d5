"""Device math: reference kernels (torch, run anywhere) and their device implementations.

May import torch lazily; torch_npu only inside the Ascend implementations, chosen by a dispatch.
"""
