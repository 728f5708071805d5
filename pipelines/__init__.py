"""Workloads: what a job asks of the model (prompts, output schema) and how the answer is parsed.

Pure Python plus pydantic, and jsonschema lazily, when installed. Layer: beside ``engine`` and ``kernels`` and
independent of both, except that it may read ``engine.structured`` (the grammar backend's limits, no engine code);
below ``worker``. May import ``preprocessing`` and the core; never ``worker``, ``api`` or the ``vlbatch``
commands. Never imports vllm, vllm_ascend, torch or torch_npu, not even through another package: pipelines build
plain request objects that ``engine`` turns into engine calls.

``lint-imports`` checks these rules (the contracts in pyproject.toml).
"""
