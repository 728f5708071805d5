"""The one rule for a client-named local path (``vlbatch.paths``): local or not, inside the roots or not.

The readers' own tests (``tests/preprocessing/test_paths.py``: special files, descriptors; the API's and the
worker's confinement tests) go through it; here the rule itself, and a source check that no product module spells
it again.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

import vlbatch.paths
from vlbatch.errors import INPUT_PATH_REFUSED
from vlbatch.paths import (
    Confinement,
    PathRefused,
    confined,
    inside,
    is_local,
    lexically_inside,
    local_path,
    normalised,
)

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("cli", "api", "worker", "jobs", "engine", "kernels", "pipelines", "preprocessing", "vlbatch")


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """``root/`` (with ``a.jpg``, ``sub/``, a link to ``a.jpg`` and one leading out) beside ``outside/``."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "a.jpg").write_bytes(b"a")
    (outside / "secret.jpg").write_bytes(b"s")
    (root / "inner.jpg").symlink_to(root / "a.jpg")
    (root / "out.jpg").symlink_to(outside / "secret.jpg")
    (root / "out_dir").symlink_to(outside)
    return tmp_path


def _refusal(raw: str, roots: list[Path], **kw: object) -> PathRefused:
    with pytest.raises(PathRefused) as caught:
        confined(raw, roots, **kw)  # type: ignore[arg-type]
    return caught.value


@pytest.mark.parametrize(
    ("source", "local"),
    [
        ("/a/b.jpg", True),
        ("b.jpg", True),
        ("file:///a/b.jpg", True),
        ("FILE:///a/b.jpg", True),
        ("data:image/png;base64,AAAA", False),
        ("DATA:image/png;base64,AAAA", False),
        ("http://host/b.jpg", False),
        ("s3://bucket/b.jpg", False),
    ],
)
def test_what_is_local(source: str, local: bool) -> None:
    assert is_local(source) is local


def test_file_urls_name_their_path_and_paths_are_normalised() -> None:
    assert local_path("file:///a/b.jpg") == local_path("File:///a/b.jpg") == "/a/b.jpg"
    assert local_path("/a/b.jpg") == "/a/b.jpg"
    assert normalised("/a/x/../b.jpg") == "/a/b.jpg"
    assert normalised("file:///a/./b.jpg") == "file:///a/b.jpg"
    assert normalised("http://h/a/../b.jpg") == "http://h/a/../b.jpg"  # not local: as given
    assert normalised("") == ""


def test_a_file_inside_a_root_is_itself_resolved(tree: Path) -> None:
    root = tree / "root"
    assert confined(str(root / "a.jpg"), [root], must_exist=True, kind="file") == (root / "a.jpg").resolve()
    assert confined(f"file://{root / 'a.jpg'}", [root]) == (root / "a.jpg").resolve()
    assert confined(str(root / "inner.jpg"), [root]) == (root / "a.jpg").resolve()  # a link that stays inside
    assert confined(str(root / "sub" / ".." / "a.jpg"), [root]) == (root / "a.jpg").resolve()


@pytest.mark.parametrize("name", ["out.jpg", "out_dir/secret.jpg", "sub/../../outside/secret.jpg"])
def test_symlinks_and_dotdot_that_lead_out_are_refused_as_outside(tree: Path, name: str) -> None:
    exc = _refusal(str(tree / "root" / name), [tree / "root"])
    assert exc.code == INPUT_PATH_REFUSED and not exc.missing
    assert "outside the allowed input roots" in exc.message


def test_outside_the_roots_a_missing_file_and_an_existing_one_answer_alike(tree: Path) -> None:
    root = tree / "root"
    there = _refusal(str(tree / "outside" / "secret.jpg"), [root], must_exist=True)
    missing = _refusal(str(tree / "outside" / "nothing.jpg"), [root], must_exist=True)
    assert not there.missing and not missing.missing
    assert there.message.replace("secret", "nothing") == missing.message
    assert str(root) not in there.message and str(tree) in there.message  # the path as sent, never a root


def test_a_missing_file_inside_the_roots_is_missing_only_when_it_must_exist(tree: Path) -> None:
    root = tree / "root"
    assert confined(str(root / "later.jpg"), [root]) == root / "later.jpg"  # an inline item named ahead of time
    assert _refusal(str(root / "later.jpg"), [root], must_exist=True).missing
    assert _refusal(str(root / "later.jpg"), [root], kind="file").missing


def test_kinds(tree: Path) -> None:
    root = tree / "root"
    assert confined(str(root / "sub"), [root], must_exist=True, kind="dir") == (root / "sub").resolve()
    assert confined(str(root / "new"), [root], kind="dir") == root / "new"  # a folder to be written into
    assert "is not a directory" in _refusal(str(root / "new"), [root], must_exist=True, kind="dir").message
    assert "is not a directory" in _refusal(str(root / "a.jpg"), [root], kind="dir").message
    assert "is not a file" in _refusal(str(root / "sub"), [root], kind="file").message


def test_no_roots_refuses_everything_and_says_none_are_configured(tree: Path) -> None:
    assert "no input roots are configured" in _refusal(str(tree / "root" / "a.jpg"), []).message


def test_a_nul_byte_or_a_loop_is_a_refusal_not_a_crash(tree: Path) -> None:
    root = tree / "root"
    (root / "loop").symlink_to(root / "loop")
    assert _refusal(str(root / "a\0.jpg"), [root]).code == INPUT_PATH_REFUSED
    assert _refusal(str(root / "loop"), [root], must_exist=True).code == INPUT_PATH_REFUSED


def test_a_root_named_through_a_symlink_holds_what_its_target_holds(tree: Path) -> None:
    linked = tree / "linked_root"
    linked.symlink_to(tree / "root")
    assert confined(str(tree / "root" / "a.jpg"), [linked]) == (tree / "root" / "a.jpg").resolve()
    assert lexically_inside(tree / "root" / "a.jpg", [linked]) and lexically_inside(linked / "a.jpg", [linked])
    assert not lexically_inside(tree / "rootless" / "a.jpg", [tree / "root"])  # a sibling with the root's prefix
    assert inside(tree / "root" / "inner.jpg", [linked]) and not inside(tree / "root" / "out.jpg", [linked])


def test_no_product_module_spells_the_rule_again() -> None:
    """The checks the rule is made of (a path under a resolved root, ``file://`` peeled off by hand) stand in
    ``vlbatch/paths.py`` only. ``jobs/exports/xmp.py`` places a sidecar below ``--out`` (a layout, not a root)."""
    spelled = re.compile(r"is_relative_to\(|removeprefix\(\s*[\"']file://|\[len\(\s*[\"']file://")
    allowed = {Path("vlbatch/paths.py"), Path("jobs/exports/xmp.py")}
    found = []
    for package in PRODUCT:
        for dirpath, _, files in os.walk(REPO / package):
            for name in files:
                path = Path(dirpath, name)
                rel = path.relative_to(REPO)
                if name.endswith(".py") and rel not in allowed and spelled.search(path.read_text(encoding="utf-8")):
                    found.append(str(rel))
    assert not found, f"path confinement spelled outside vlbatch/paths.py: {found}"


def test_a_request_s_confinement_answers_as_the_whole_resolve_for_every_path_and_kind(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Confinement`` resolves most paths from their folder, resolved once per request, and one ``lstat``; for
    every path (in, out, through symlinks that stay or leave, dangling, looping, ``..`` after a link, a file on the
    way, not normalised, too long) and every kind it answers what ``realpath`` of the whole path answers: the same
    resolved path, or the same refusal. Each path is asked twice: the second time its folder comes from the memo."""
    root = tree / "root"
    (root / "loop").symlink_to(root / "loop")
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "rel_out").symlink_to("../outside")
    (tree / "linked_root").symlink_to(root)
    names = [
        "a.jpg",
        "missing.jpg",
        "sub",
        "sub/",
        "sub/.",
        "sub/..",
        "sub/../a.jpg",
        "sub/../../outside/secret.jpg",
        "inner.jpg",
        "out.jpg",
        "out_dir",
        "out_dir/secret.jpg",
        "out_dir/../root/a.jpg",
        "out_dir/..",
        "rel_out/secret.jpg",
        "dangling",
        "dangling/x.jpg",
        "loop",
        "loop/x.jpg",
        "a.jpg/x.jpg",
        "no/such/x.jpg",
        "./a.jpg",
        "sub//a.jpg",
        "n" * 300,
        "d/" * 2100 + "x.jpg",
        "日本 é😀.jpg",
        "new\nline.jpg",
        "a\0.jpg",
    ]
    paths = [f"{root}/{n}" for n in names] + [
        str(root), f"/{root}/a.jpg", f"{tree}/linked_root/a.jpg", f"{tree}/linked_root/out.jpg",
        f"{tree}/outside/secret.jpg", f"{root}less/a.jpg", "/", "/etc", "relative.jpg", "~/a.jpg",
    ]  # fmt: skip
    asks: list[dict[str, Any]] = [{}, {"must_exist": True}, {"kind": "file"}, {"kind": "dir"}]
    asks.append({"kind": "dir", "must_exist": True})

    def answers(rule: Confinement) -> list[object]:
        found: list[object] = []
        for path in paths * 2:
            for ask in asks:
                try:
                    found.append(rule.checked(path, **ask))
                except PathRefused as exc:
                    found.append((exc.message, exc.missing))
        return found

    for roots in ([root], [tree / "linked_root"], [root, tree / "outside" / "nothing"]):
        quick = answers(Confinement(roots))
        with monkeypatch.context() as m:
            m.setattr(vlbatch.paths, "_plain", lambda path: False)
            whole = answers(Confinement(roots))
        assert quick == whole
        assert sum(isinstance(a, str) for a in quick) >= 20  # paths that pass, not only refusals
