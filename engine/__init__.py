"""Model execution: one vLLM engine per worker process (``engine.runtime``: config, requests, runner, occupancy,
chat prompts); the platform layer (``engine.platforms``) that holds every per-vendor fact; planning
(``engine.planning``: planner, model shapes, rendering). The modules left at the top are shared by those three:
device specs and discovery, telemetry, vision geometry, the structured-output grammar and the tiny test model.

Layer: beside ``pipelines`` and ``kernels`` and independent of both (it imports neither; ``pipelines`` may read
``engine.structured`` alone), below ``worker``; it may import ``preprocessing`` and the core, never ``worker``,
``api`` or the ``vlbatch`` commands. torch_npu and vllm_ascend are imported only inside ``engine.platforms``.

vllm, torch, torch_npu and vllm_ascend are imported lazily, inside functions (the runner's engine start, a
platform's per-chip op), never at module top, so that importing ``engine`` never touches a device
(tests/test_import_rules.py checks it; ``lint-imports`` checks the rest, from the contracts in pyproject.toml).
"""
