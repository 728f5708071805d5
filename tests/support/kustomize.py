"""``kustomize build`` for the subset deploy/kubernetes uses, in Python (no kustomize binary in the test command):
``resources`` (files and directories), ``images`` (newName/newTag) and ``patches`` given by ``path`` as strategic
merge patches. Lists of objects with a ``name`` merge item by item on it (containers, env, volumes, volumeMounts
with distinct names, as their patch merge keys would), other lists are replaced; anything else in a
kustomization is refused so a feature the overlays start using cannot be skipped silently."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "images", "patches"}


def build(directory: Path) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - SUPPORTED
    assert not unknown, f"{directory}: kustomization fields this builder does not apply: {sorted(unknown)}"
    docs: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        docs += build(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    for patch_entry in kustomization.get("patches", []):
        assert set(patch_entry) == {"path"}, f"{directory}: only file patches are supported: {patch_entry}"
        for patch in yaml.safe_load_all((directory / patch_entry["path"]).read_text()):
            target = _find(docs, patch)
            docs[docs.index(target)] = merge(target, patch)
    for image in kustomization.get("images", []):
        for doc in docs:
            for container in _containers(doc):
                if container["image"].split(":")[0] == image["name"]:
                    container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    return docs


def _find(docs: list[dict[str, Any]], patch: dict[str, Any]) -> dict[str, Any]:
    key = (patch["kind"], patch["metadata"]["name"])
    found = [d for d in docs if (d["kind"], d["metadata"]["name"]) == key]
    assert len(found) == 1, f"patch target {key} matches {len(found)} resources"
    return found[0]


def merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for k, v in patch.items():
            out[k] = merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        out = copy.deepcopy(base)
        for item in patch:
            same = [i for i, b in enumerate(out) if b["name"] == item["name"]]
            if same:
                out[same[0]] = merge(out[same[0]], item)
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def _named(items: list[Any]) -> bool:
    return all(isinstance(i, dict) and "name" in i for i in items)


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    pod = doc.get("spec", {}).get("template", {}).get("spec", {})
    return [*pod.get("containers", []), *pod.get("initContainers", [])]
