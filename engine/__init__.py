"""Model execution: one vLLM engine per worker process, and per-vendor platform facts.

The only package (with ``kernels``) allowed to import vllm, torch, torch_npu or vllm_ascend, and
only lazily, inside functions, so that importing ``engine`` never touches a device.
"""
