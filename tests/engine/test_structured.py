"""Every pipeline's output schema, as the runner sends it, compiles in vLLM's grammar backend.

Pure: vLLM's own schema check and xgrammar's compiler with the tiny model's tokenizer, no engine. This
is what a default caption (200 characters) or summary (1,200) broke once: xgrammar does not compile a
bounded repeat above MAX_PATTERN_REPEAT, and vLLM refuses length keywords beside a pattern.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.structured import for_vllm
from pipelines import classify, extract, image_tagging, summarize

SCHEMAS: dict[str, Any] = {
    "tagging default + caption": image_tagging.output_schema(image_tagging.TaggingOptions(caption=True)),
    "tagging closed list": image_tagging.output_schema(image_tagging.TaggingOptions(vocabulary=["dog", "cat"])),
    "summarize default": summarize.output_schema(summarize.Options()),
    "summarize longest": summarize.output_schema(summarize.Options(max_summary_chars=20000)),
    "extract": extract.output_schema(
        extract.Options(
            json_schema={
                "type": "object",
                "properties": {
                    "parties": {"type": "array", "items": {"type": "string"}},
                    "total": {"type": "number"},
                    "ref": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$", "maxLength": 20},
                },
                "required": ["parties"],
            }
        )
    ),
    "classify": classify.output_schema(classify.Options(labels=["contract", "report", "manual"])),
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_compiles_in_the_grammar_backend(name: str, tiny_model: Path) -> None:
    xgr = pytest.importorskip("xgrammar")
    backend = pytest.importorskip("vllm.v1.structured_output.backend_xgrammar")
    from transformers import AutoTokenizer

    schema = for_vllm(SCHEMAS[name])
    assert not backend.has_xgrammar_unsupported_json_features(schema), schema
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer)))
    compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
