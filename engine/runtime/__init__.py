"""The engine at run time: its configuration (``config``), the request and answer types (``requests``), the runner
that owns one vLLM engine (``runner``), the stub engine it feeds instead when the configuration says so (``stub``:
no model, faults on cue), the scheduler's occupancy (``occupancy``) and chat prompts rendered by the model's own
template (``chat``).

vllm is imported inside the runner's functions only (``runner.EngineRunner.load``), never at module top. Planning
(``engine.planning``) and the per-vendor facts (``engine.platforms``) live beside this package; runtime asks a
platform, it never compares platform names.
"""
