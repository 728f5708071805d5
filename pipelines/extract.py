"""The ``extract`` pipeline: fields the requester names in a JSON Schema, per chunk, merged per document.

The user's schema is checked before the job runs (``SchemaError`` -> HTTP 422), then bounded for the
engine: every string gets a ``maxLength`` (and, unless the requester gave a pattern, an escape-free
pattern), every array a ``maxItems``, every property becomes required but nullable at the top level (a
chunk may not mention it), so the answer's size has an upper bound and ``max_output_tokens`` can be
computed from the schema. ``$ref`` is refused for the same reason: a
recursive schema has no bound. Per-chunk answers merge in document order: lists are unioned without
duplicates, a scalar takes the first non-null value, and every value keeps the pages it came from.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from typing import Any

from pydantic import Field, field_validator

from pipelines.base import DocumentPipeline
from pipelines.documents_common import (
    MAX_TOKENS_PER_CHAR,
    MAX_TOKENS_PER_ESCAPED_CHAR,
    DocumentOptions,
    ParseError,
    PassageResult,
    defang,
    document_block,
    is_plain_string,
    literal_tokens,
    load_json,
    plain_string,
)
from preprocessing.chunking import Passage
from vlbatch.errors import INVALID_SCHEMA, VlbatchError

__all__ = [
    "NAME",
    "SYSTEM_PREFIX",
    "VERSION",
    "ExtractOptions",
    "Options",
    "ParseError",
    "SchemaError",
    "map_prompt",
    "max_output_tokens",
    "merge_answers",
    "output_schema",
    "parse_answer",
    "validate_user_schema",
]

NAME = "extract"
VERSION = "1"

SYSTEM_PREFIX = (
    "You extract fields from documents into JSON. Use only what the text states, copy names, dates and "
    "amounts as written, and answer null (or an empty list) for a field the text does not give."
)

MAX_PROPERTIES = 200
MAX_DEPTH = 5
_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})
# Keywords whose answers have no size bound or that structured-output grammars do not support, with the fix.
_REFUSED = {
    "$ref": "write the referenced sub-schema out in full",
    "$defs": "write the sub-schemas out in full",
    "definitions": "write the sub-schemas out in full",
    "$dynamicRef": "write the sub-schema out in full",
    "allOf": "merge the sub-schemas into one",
    "patternProperties": "name the properties",
    "if": "describe the condition in the field's description",
    "not": "list the allowed values with 'enum'",
}
_SCALAR_TOKENS = {"integer": 20, "number": 24, "boolean": 5, "null": 4}


class SchemaError(VlbatchError, ValueError):
    """The requester's schema cannot drive an extraction; the message names the path and the fix.

    Also a ``ValueError``: the options' field validator raises it, and pydantic reports only ``ValueError``
    (and ``AssertionError``) as a validation error of the field.
    """

    code = INVALID_SCHEMA


class ExtractOptions(DocumentOptions):
    json_schema: dict[str, Any] = Field(
        ..., description="JSON Schema of the fields to extract: an object schema with properties."
    )
    max_string_chars: int = Field(300, ge=1, le=20000, description="maxLength for strings that set none (or more).")
    max_array_items: int = Field(50, ge=1, le=1000, description="maxItems for arrays that set none (or more).")

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        return validate_user_schema(value)  # a SchemaError becomes the options' ValidationError (422 in the API)


# ------------------------------------------------------------------------------------- validation


def validate_user_schema(schema: Any) -> dict[str, Any]:
    """Check a requester's schema is an object schema with properties, of types the engine can bound.

    Structural checks always run; when ``jsonschema`` is importable the schema is also checked against
    the JSON Schema metaschema, which catches misspelt keywords' values (``"type": "strng"``).
    """
    if not isinstance(schema, dict):
        raise SchemaError(f"schema must be a JSON object, got {type(schema).__name__}")
    if schema.get("type", "object") != "object":
        raise SchemaError(f"schema 'type' must be \"object\", got {schema.get('type')!r}")
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        raise SchemaError("schema needs a non-empty 'properties' object naming the fields to extract")
    _metaschema_check(schema)
    count = _check_node(schema, "$", 0)
    if count > MAX_PROPERTIES:
        raise SchemaError(f"schema has {count} properties in all; the limit is {MAX_PROPERTIES}")
    return schema


def _metaschema_check(schema: dict[str, Any]) -> None:
    try:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError as MetaError
    except ImportError:  # not a declared dependency; the structural checks below still hold
        return
    try:
        Draft202012Validator.check_schema(schema)
    except MetaError as exc:
        where = "$" + "".join(f"[{p!r}]" for p in exc.path)
        raise SchemaError(f"not a valid JSON Schema at {where}: {exc.message}") from exc


def _check_node(node: Any, path: str, depth: int) -> int:
    """Validate one sub-schema; returns the number of object properties beneath it (for the size limit)."""
    if not isinstance(node, dict):
        raise SchemaError(f"{path}: a schema must be an object, got {type(node).__name__}")
    if depth > MAX_DEPTH:
        raise SchemaError(f"{path}: nested deeper than {MAX_DEPTH} levels; flatten the schema")
    for key, fix in _REFUSED.items():
        if key in node:
            raise SchemaError(f"{path}: '{key}' is not supported; {fix}")
    types = node.get("type")
    type_list = types if isinstance(types, list) else [types] if types is not None else []
    for t in type_list:
        if t not in _TYPES:
            raise SchemaError(f"{path}: unknown type {t!r}; use one of {sorted(_TYPES)}")
    if "enum" in node and (not isinstance(node["enum"], list) or not node["enum"]):
        raise SchemaError(f"{path}: 'enum' must be a non-empty list")
    if not type_list and "enum" not in node and "const" not in node and not _alternatives(node):
        raise SchemaError(f"{path}: give a 'type' (or 'enum', 'const', 'anyOf'); an untyped value has no bound")
    count = 0
    for key in ("anyOf", "oneOf"):
        if key in node:
            if not isinstance(node[key], list) or not node[key]:
                raise SchemaError(f"{path}: '{key}' must be a non-empty list of schemas")
            count += sum(_check_node(sub, f"{path}.{key}[{i}]", depth + 1) for i, sub in enumerate(node[key]))
    if "object" in type_list:
        props = node.get("properties")
        if not isinstance(props, dict) or not props:
            raise SchemaError(f"{path}: an object needs 'properties' (free-form objects have no bound)")
        for name, sub in props.items():
            if not name or len(name) > 64:
                raise SchemaError(f"{path}: property name {name!r} must be 1..64 characters")
            count += 1 + _check_node(sub, f"{path}.{name}", depth + 1)
        required = node.get("required", [])
        if not isinstance(required, list) or any(r not in props for r in required):
            raise SchemaError(f"{path}: 'required' must list names from 'properties', got {required!r}")
    if "array" in type_list and "items" in node:
        count += _check_node(node["items"], f"{path}[]", depth + 1)
    return count


def _alternatives(node: dict[str, Any]) -> list[Any]:
    return list(node.get("anyOf") or node.get("oneOf") or [])


# ----------------------------------------------------------------------------------- engine schema


Options = ExtractOptions  # the same name in every document pipeline, for generic wiring


def output_schema(opts: ExtractOptions) -> dict[str, Any]:
    """The per-chunk structured-output schema: the user's, bounded, every top-level field nullable."""
    props = {name: _nullable(_bounded(sub, opts)) for name, sub in opts.json_schema["properties"].items()}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


_ENGINE_KEYWORDS = {
    "any": frozenset({"type", "enum", "const", "description"}),
    "string": frozenset({"minLength", "maxLength", "pattern"}),
    "integer": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    "number": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    "array": frozenset({"minItems", "maxItems"}),
}


def _bounded(node: dict[str, Any], opts: ExtractOptions) -> dict[str, Any]:
    """A copy of ``node`` with size bounds; optional object properties become required-but-nullable so the
    answer always has the same keys.
    """
    keep = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf", "properties", "items", "required")}
    if alts := _alternatives(node):
        return {"anyOf": [_bounded({**keep, **alt}, opts) for alt in alts]}
    types = node.get("type")
    if isinstance(types, list):  # ["string", "null"] -> anyOf, each branch bounded on its own
        return {"anyOf": [_bounded({**node, "type": t}, opts) for t in types]}
    # Only keywords grammar backends enforce reach the engine; the rest ("format", "multipleOf",
    # "uniqueItems", annotations) stay in the prompt, which shows the requester's whole schema.
    allowed = _ENGINE_KEYWORDS["any"] | _ENGINE_KEYWORDS.get(str(types), frozenset())
    out = {k: v for k, v in keep.items() if k in allowed}
    if types == "string" and "enum" not in node and "const" not in node:
        cap = min(int(node.get("maxLength", opts.max_string_chars)), opts.max_string_chars)
        low = min(int(node.get("minLength", 0)), cap)  # a cap below the minimum would leave no valid answer
        if "pattern" in node:  # the requester's pattern stays; it may allow escapes (see the token bound)
            out.update(minLength=low, maxLength=cap)
        else:
            out.update(plain_string(low, cap))
    elif types == "array":
        items = node.get("items") or {"type": "string"}
        out["items"] = _bounded(items, opts)
        out["maxItems"] = min(int(node.get("maxItems", opts.max_array_items)), opts.max_array_items)
        if int(node.get("minItems", 0)) > out["maxItems"]:
            out["minItems"] = out["maxItems"]
    elif types == "object":
        wanted = set(node.get("required", []))
        props = {
            name: _bounded(sub, opts) if name in wanted else _nullable(_bounded(sub, opts))
            for name, sub in node["properties"].items()
        }
        out.update(properties=props, required=list(props), additionalProperties=False)
    return out


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    if node.get("type") == "null" or any(a.get("type") == "null" for a in node.get("anyOf", [])):
        return node
    if "anyOf" in node:
        return {"anyOf": [*node["anyOf"], {"type": "null"}]}
    return {"anyOf": [node, {"type": "null"}]}


def max_output_tokens(opts: ExtractOptions) -> int:
    """Upper bound on answer tokens from the bounded schema (see ``MAX_TOKENS_PER_CHAR``)."""
    return _node_tokens(output_schema(opts)) + 16


def _node_tokens(node: dict[str, Any]) -> int:
    if "anyOf" in node:
        return max(_node_tokens(alt) for alt in node["anyOf"])
    if "const" in node:
        return literal_tokens(node["const"])
    if "enum" in node:
        return max(literal_tokens(v) for v in node["enum"])
    kind = node.get("type")
    if kind == "string":
        per_char = MAX_TOKENS_PER_CHAR if is_plain_string(node) else MAX_TOKENS_PER_ESCAPED_CHAR
        return per_char * int(node["maxLength"]) + 2
    if kind == "array":
        return 2 + int(node["maxItems"]) * (_node_tokens(node["items"]) + 2)
    if kind == "object":
        return 2 + sum(literal_tokens(k) + 2 + _node_tokens(v) + 2 for k, v in node["properties"].items())
    # JSON numbers have no digit limit in the grammar: this is the size of any sensible one, and a model
    # that runs on past it is cut at max_tokens (output_truncated).
    return _SCALAR_TOKENS.get(str(kind), 24)


# ------------------------------------------------------------------------------------------ prompts


def map_prompt(chunk: Passage, opts: ExtractOptions, *, total_pages: int | None = None) -> str:
    """User prompt for one chunk: the fields (as the requester described them), then the text."""
    fields = json.dumps(opts.json_schema["properties"], ensure_ascii=False, separators=(",", ":"))
    extra = f"\nInstructions from the requester: {defang(opts.instructions)}" if opts.instructions else ""
    return (
        "Extract these fields from the document excerpt below. It may be one part of a longer document: give "
        f"null for a field this part does not state.\nFields (JSON Schema properties): {defang(fields)}{extra}"
        "\n\n" + document_block(chunk, total_pages=total_pages)
    )


def parse_answer(text: str, opts: ExtractOptions, *, finish_reason: str | None = None) -> dict[str, Any]:
    """The chunk's answer: every top-level field present (missing -> null), unknown keys dropped."""
    data = load_json(text, finish_reason=finish_reason)
    if not isinstance(data, dict):
        raise ParseError(f"model answer is not a JSON object: {str(data)[:200]}")
    props: dict[str, Any] = opts.json_schema["properties"]
    out: dict[str, Any] = {}
    for name, sub in props.items():
        value = data.get(name)
        if value is not None and not _type_fits(value, sub):
            raise ParseError(f"field {name!r}: {json.dumps(value)[:100]} does not match type {sub.get('type')!r}")
        out[name] = value
    return out


def _type_fits(value: Any, node: dict[str, Any]) -> bool:
    """A shallow type check of a top-level value (the engine's grammar did the full one)."""
    types = node.get("type")
    if types is None:
        return True
    allowed = types if isinstance(types, list) else [types]
    checks = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
        "null": lambda v: v is None,
    }
    return any(checks[t](value) for t in allowed if t in checks)


# -------------------------------------------------------------------------------------------- merge


def _key(value: Any) -> str:
    """Identity for de-duplication: strings compare case- and whitespace-insensitively."""
    if isinstance(value, str):
        return " ".join(unicodedata.normalize("NFKC", value).casefold().split())
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _is_list_field(node: dict[str, Any]) -> bool:
    types = node.get("type")
    return types == "array" or (isinstance(types, list) and "array" in types)


def merge_answers(results: Sequence[PassageResult], opts: ExtractOptions) -> dict[str, Any]:
    """One document answer from per-chunk answers (any order; merged in chunk order).

    Returns ``{"data": {...}, "provenance": {field: [{"value", "pages", "chunks"}, ...]}, "missing": [...],
    "conflicts": [...]}``. For a list field each provenance entry is one list item; for any other field the
    entries are the distinct candidates, the first of which is ``data[field]``. ``missing`` names the
    schema's required fields no chunk gave; ``conflicts`` the scalar fields with more than one candidate.
    """
    ordered = sorted(results, key=lambda r: r.chunk_index)
    props: dict[str, Any] = opts.json_schema["properties"]
    data: dict[str, Any] = {}
    provenance: dict[str, list[dict[str, Any]]] = {}
    for name, sub in props.items():
        entries: dict[str, dict[str, Any]] = {}
        for result in ordered:
            value = result.answer.get(name)
            values = value if _is_list_field(sub) and isinstance(value, list) else [value]
            for v in values:
                if v is None or v == "" or v == []:
                    continue
                entry = entries.setdefault(_key(v), {"value": v, "pages": set(), "chunks": []})
                entry["pages"].update(result.pages)
                if result.chunk_index not in entry["chunks"]:
                    entry["chunks"].append(result.chunk_index)
        provenance[name] = [{**e, "pages": sorted(e["pages"])} for e in entries.values()]
        if _is_list_field(sub):
            data[name] = [e["value"] for e in provenance[name]]
        else:
            data[name] = provenance[name][0]["value"] if provenance[name] else None
    required = opts.json_schema.get("required", [])
    return {
        "data": data,
        "provenance": provenance,
        "missing": [n for n in required if data.get(n) in (None, [])],
        "conflicts": [n for n, sub in props.items() if not _is_list_field(sub) and len(provenance[n]) > 1],
    }


class Extract(DocumentPipeline):
    name = NAME
    version = VERSION
    Options = ExtractOptions
    system_prefix = SYSTEM_PREFIX

    def map_prompt(self, chunk: Passage, opts: ExtractOptions, *, total_pages: int | None) -> str:
        return map_prompt(chunk, opts, total_pages=total_pages)

    def output_schema(self, opts: ExtractOptions) -> dict[str, Any]:
        return output_schema(opts)

    def max_output_tokens(self, opts: ExtractOptions) -> int:
        return max_output_tokens(opts)

    def parse(self, text: str, opts: ExtractOptions, *, finish_reason: str | None) -> dict[str, Any]:
        return parse_answer(text, opts, finish_reason=finish_reason)

    def merge(self, results: Sequence[PassageResult], opts: ExtractOptions) -> dict[str, Any]:
        return merge_answers(results, opts)


PIPELINE = Extract()
