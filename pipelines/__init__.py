"""Workloads: what a job asks of the model (prompts, output schema) and how the answer is parsed.

Pure Python plus pydantic; may import ``preprocessing``, ``engine.structured`` (the grammar backend's
limits, no engine code) and ``jsonschema`` lazily, when installed.
Never imports vllm: pipelines build plain request objects that ``engine`` turns into engine calls.
"""
