"""The docs site's generated pages, written from the code so they cannot drift from it.

* ``docs/settings.md``: every setting of :class:`vlbatch.settings.Settings`, one table per section (its ``VLBATCH_``
  variables, type, default and description), between the markers there; the prose above them is kept.
* ``docs/error-codes.md``: the registry's table (:mod:`vlbatch.error_docs`), between its markers.
* ``docs/api-reference.md``: every route of the API's OpenAPI schema (``create_app(...).openapi()``, no server, no
  network) with its parameters, body, answers and error codes, then every schema's fields. Whole page.

``python -m cli.docs_pages`` rewrites all three; ``--check`` exits 1 naming the stale ones (``tests/test_docs_site.py``
runs the same comparison). ``scripts/docs.sh`` regenerates them before it serves the site.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from vlbatch import error_docs
from vlbatch.settings import Settings, env_names, sections

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SETTINGS_START = "<!-- settings:start -->"
SETTINGS_END = "<!-- settings:end -->"
_METHODS = ("get", "post", "put", "patch", "delete")


def _cell(text: object) -> str:
    """``text`` on one line of a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _type_name(annotation: Any) -> str:
    name = getattr(annotation, "__name__", None) if getattr(annotation, "__args__", None) is None else None
    text = name or str(annotation)
    for noise in ("typing.", "pathlib.", "pydantic.types.", "pydantic.networks.", "ipaddress."):
        text = text.replace(noise, "")
    text = re.sub(r"vlbatch\.settings\.(\w+\.)?", "", text)
    return text.replace("NoneType", "None")


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "unset"
    if hasattr(value, "get_secret_value"):
        return "(secret)"
    if isinstance(value, Path):
        return f"`{value}`"
    return f"`{json.dumps(value, default=str)}`"


def settings_table() -> str:
    """Every setting, section by section in the order of the class: its variables, type, default and description."""
    lines: list[str] = []
    for section, model in sections():
        summary = (model.__doc__ or "").strip().split("\n\n")[0]
        lines += [f"### `settings.{section}`", "", " ".join(summary.split()), ""]
        lines += ["| Variable | Type | Default | What it sets |", "| --- | --- | --- | --- |"]
        for name, field in model.model_fields.items():
            env = " or ".join(f"`{e}`" for e in env_names(name))
            lines.append(
                f"| {env} | {_cell(_type_name(field.annotation))} | {_cell(_default(field))} "
                f"| {_cell(field.description or '')} |"
            )
        lines.append("")
    return "\n".join(lines)


def with_settings(page: str) -> str:
    return error_docs.between_markers(page, SETTINGS_START, SETTINGS_END, settings_table())


class _Defaults(Settings):
    """The settings as shipped: no environment variable or ``.env`` of the machine that generates the page (with
    ``VLBATCH_AUTH=off`` the routes would list no 401)."""

    if TYPE_CHECKING:
        # As Settings: built by flat names, checked at run time.
        def __init__(self, **values: Any) -> None: ...

    @classmethod
    def settings_customise_sources(cls, settings_cls: Any, init_settings: Any, *_: Any, **__: Any) -> tuple[Any, ...]:
        return (init_settings,)


def openapi_spec() -> dict[str, Any]:
    """The API's OpenAPI schema as ``/openapi.json`` serves it on the shipped defaults, built without a server
    (nothing is migrated, nothing fetched)."""
    from api.main import create_app

    with tempfile.TemporaryDirectory() as tmp:
        settings = _Defaults(database_url=f"sqlite:///{tmp}/spec.db", data_dir=Path(tmp))
        spec: dict[str, Any] = create_app(settings).openapi()
    return spec


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(_schema_type(s) for s in schema.get("anyOf", schema.get("oneOf", [])))
    if schema.get("type") == "array":
        return f"list of {_schema_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    return str(schema.get("type", "any"))


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}`", "", _cell(op.get("summary", ""))]
    if op.get("description"):
        out += ["", op["description"].strip()]
    params = op.get("parameters", [])
    if params:
        out += ["", "| Parameter | In | Type | Required | Description |", "| --- | --- | --- | --- | --- |"]
        for p in params:
            out.append(
                f"| `{p['name']}` | {p['in']} | {_cell(_schema_type(p.get('schema', {})))} "
                f"| {'yes' if p.get('required') else 'no'} | {_cell(p.get('description', ''))} |"
            )
    body = op.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        out += ["", f"Body ({media}): {_schema_type(content.get('schema', {}))}"]
    out += ["", "| Status | Answer | Error codes |", "| --- | --- | --- |"]
    for status, answer in sorted(op.get("responses", {}).items()):
        codes = ", ".join(f"`{c}`" for c in answer.get("x-error-codes", []))
        contents: list[dict[str, Any]] = list(answer.get("content", {}).values())
        schema = contents[0].get("schema", {}) if contents else {}
        shown = _schema_type(schema) if not codes and schema else answer.get("description", "").split("\n", 1)[0]
        out.append(f"| {status} | {_cell(shown if not codes else 'error')} | {codes} |")
    return [*out, ""]


def _component(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"### {name}", ""]
    if schema.get("description"):
        out += [_cell(schema["description"]), ""]
    props = schema.get("properties")
    if not props:
        return [*out, f"Type: {_cell(_schema_type(schema))}", ""]
    required = set(schema.get("required", []))
    out += ["| Field | Type | Required | Description |", "| --- | --- | --- | --- |"]
    for field, sub in props.items():
        out.append(
            f"| `{field}` | {_cell(_schema_type(sub))} | {'yes' if field in required else 'no'} "
            f"| {_cell(sub.get('description', ''))} |"
        )
    return [*out, ""]


def api_reference(spec: dict[str, Any] | None = None) -> str:
    """The API reference page: the routes grouped by their first tag, then the schemas."""
    spec = spec or openapi_spec()
    groups: dict[str, list[str]] = {}
    for path, item in spec["paths"].items():
        for method in _METHODS:
            if method in item:
                tag = (item[method].get("tags") or ["other"])[0]
                groups.setdefault(tag, []).extend(_operation(method, path, item[method]))
    lines = [
        "# API reference",
        "",
        "<!-- Generated from the API's OpenAPI schema by `python -m cli.docs_pages`; do not edit by hand. -->",
        "",
        f"{spec['info']['title']} {spec['info']['version']}. Every route but `/healthz` and `/readyz` takes an API key "
        "(`Authorization: Bearer <key>` or `X-API-Key: <key>`; [Access](access.md)); every request with a body sends "
        "`Content-Type: application/json` (uploads: `multipart/form-data`). A running API serves the same schema at "
        '`/openapi.json` and an explorer at `/docs`. Error bodies are `{"detail": ..., "code": ...}`; the codes '
        "are explained in [Error codes](error-codes.md).",
        "",
    ]
    for tag in sorted(groups):
        lines += [f"## {tag}", "", *groups[tag]]
    lines += ["## Schemas", ""]
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        lines += _component(name, schema)
    return "\n".join(lines).rstrip("\n") + "\n"


PAGES: dict[str, Callable[[str], str]] = {
    "settings.md": with_settings,
    "error-codes.md": error_docs.with_table,
    "api-reference.md": lambda _old: api_reference(),
}


def stale(docs: Path = DOCS) -> list[str]:
    """The generated pages whose text differs from what the code generates now."""
    found = []
    for name, make in PAGES.items():
        path = docs / name
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        if make(old) != old:
            found.append(name)
    return found


def write(docs: Path = DOCS) -> list[str]:
    """Rewrite every stale generated page; the names of those rewritten."""
    names = stale(docs)
    for name in names:
        path = docs / name
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        path.write_text(PAGES[name](old), encoding="utf-8")
    return names


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m cli.docs_pages", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page is stale")
    args = parser.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"docs/{name} is stale: run python -m cli.docs_pages")
        raise SystemExit(1 if names else 0)
    for name in write():
        print(f"wrote docs/{name}")


if __name__ == "__main__":
    main()
