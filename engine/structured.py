"""JSON schemas as vLLM's structured-output backend takes them.

vLLM refuses a string schema that puts ``minLength``/``maxLength`` beside a ``pattern`` (xgrammar cannot
combine them), so such a node keeps only its pattern; pipelines encode the length in the pattern and
keep the length keywords for their own token bounds.
"""

from __future__ import annotations

from typing import Any

# xgrammar fails to compile a bounded repetition above this ("per_rule_fsm_hashes" check; seen with
# xgrammar 0.2.8: {1,128} compiles, {1,150} does not). Pipelines leave longer strings unbounded in the
# grammar and rely on max_tokens and their parser's cut.
MAX_PATTERN_REPEAT = 128


def for_vllm(schema: Any) -> Any:
    """A copy of ``schema`` without length keywords beside patterns."""
    if isinstance(schema, list):
        return [for_vllm(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    drop = {"minLength", "maxLength"} if "pattern" in schema else set()
    return {k: for_vllm(v) for k, v in schema.items() if k not in drop}
