"""Teach the tiny Qwen2-VL a small task on CPU, so demos and quality checks have a model that answers.

Only torch and transformers; the examples (images already sized as the worker sizes them, the prompt
the pipeline sends and the expected answer) come from the caller.
"""

from engine.training.tagger import Example, TrainingReport, hf_greedy, train_tiny_vl

__all__ = ["Example", "TrainingReport", "hf_greedy", "train_tiny_vl"]
