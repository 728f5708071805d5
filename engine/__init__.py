"""Model execution: one vLLM engine per worker process; the platform layer (``engine.platforms``) that holds
every per-vendor fact; planning (``engine.planning``).

vllm, torch, torch_npu and vllm_ascend are imported lazily, inside functions (the runner's engine start, a
platform's per-chip op), never at module top, so that importing ``engine`` never touches a device
(tests/test_import_rules.py checks it).
"""
