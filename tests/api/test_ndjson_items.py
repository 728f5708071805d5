"""An NDJSON upload's item lines (``api.ndjson_items``, ``api.ndjson_jobs.item_lines``): a line of the common shape
is read without the item model and its paths confined with one ``lstat`` (``vlbatch.paths.Confinement``); every
line gets the same item, or the same refusal word for word, as when the model reads it and the path is resolved
whole. Each line below is read both ways: valid ones, wrong types, extra and repeated keys, unicode, NUL and
surrogates, lengths at and past their limits, paths outside the roots, through symlinks in and out of them, loops,
and long lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pydantic import ValidationError

import vlbatch.paths
from api import ndjson_items
from api.ndjson_items import document_line, image_line
from api.ndjson_jobs import item_lines
from api.schemas import MAX_DOCUMENT_PATH_CHARS, MAX_REF_CHARS, DocumentIn, ItemIn
from pipelines import registry
from vlbatch.db.tenants import Roots
from vlbatch.errors import VlbatchError
from vlbatch.settings import Settings

Outcome = tuple[str, Any]


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """``root/`` with files, folders and symlinks that stay inside, lead out, dangle or loop; ``outside/`` beside
    it; ``linked_root``, a symlink to ``root``."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "日本 é").mkdir()
    outside.mkdir()
    for f in (root / "a.jpg", root / "sub" / "b.jpg", root / "sub" / "deep" / "c.pdf", root / "日本 é" / "😀.jpg"):
        f.write_bytes(b"x")
    (outside / "secret.jpg").write_bytes(b"s")
    (root / "inner.jpg").symlink_to(root / "a.jpg")
    (root / "out.jpg").symlink_to(outside / "secret.jpg")
    (root / "out_dir").symlink_to(outside)
    (root / "sub_link").symlink_to(root / "sub")
    (root / "rel_out").symlink_to("../outside")
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "loop").symlink_to(root / "loop")
    (tmp_path / "linked_root").symlink_to(root)
    return tmp_path


def _paths(tree: Path) -> list[str]:
    root = tree / "root"
    return [
        f"{root}/a.jpg",
        f"{root}/missing.jpg",
        f"{root}/sub/b.jpg",
        f"{root}/sub/deep/c.pdf",
        f"{root}/sub",
        f"{root}/日本 é/😀.jpg",
        f"{root}/inner.jpg",
        f"{root}/out.jpg",
        f"{root}/out_dir/secret.jpg",
        f"{root}/out_dir/nothing.jpg",
        f"{root}/sub_link/b.jpg",
        f"{root}/sub_link/missing.jpg",
        f"{root}/rel_out/secret.jpg",
        f"{root}/dangling",
        f"{root}/dangling/x.jpg",
        f"{root}/loop",
        f"{root}/loop/x.jpg",
        f"{root}/a.jpg/x.jpg",  # a file on the way
        f"{root}/no/such/folder/x.jpg",
        f"{root}/sub/../a.jpg",
        f"{root}/sub/../../outside/secret.jpg",
        f"{root}/out_dir/../a.jpg",  # ``..`` after a symlink: resolved from the link's target
        f"{root}/./a.jpg",
        f"{root}//a.jpg",
        f"{root}/sub/",
        f"/{root}/a.jpg",
        f"{root}",
        f"{tree}/linked_root/a.jpg",
        f"{tree}/linked_root/out.jpg",
        f"{tree}/outside/secret.jpg",
        f"{tree}/outside/nothing.jpg",
        f"{tree}/rootless/a.jpg",
        f"{root}less/a.jpg",
        f"file://{root}/a.jpg",
        f"FILE://{root}/sub_link/b.jpg",
        f"{root}/{'n' * 300}.jpg",  # a name too long to be there
        f"{root}/{'d/' * 2100}x.jpg",  # a path too long to be there
        "relative/a.jpg",
        "~/a.jpg",
        "/",
        "/etc/passwd",
        "http://host/a.jpg",
        "data:image/png;base64,AAAA",
        "s3://bucket/ok/a.jpg",
        "s3://bucket/other/a.jpg",
    ]


def _whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference: every line read by its model and every path resolved whole, as before the quick ways."""
    monkeypatch.setattr(ndjson_items, "_object", lambda line, key: None)
    monkeypatch.setattr(vlbatch.paths, "_plain", lambda path: False)


def _read(lines: list[bytes], pipeline: str, tree: Path) -> list[Outcome]:
    """Each line's item (inputs, ref) or refusal (code, message), each line an upload of its own."""
    settings = Settings(allowed_input_roots=[tree / "root"])
    roots = Roots(inputs=[tree / "root"], outputs=[], s3_prefixes=["s3://bucket/ok/"])
    found: list[Outcome] = []
    for line in lines:
        try:
            (item,) = item_lines(iter([(2, line)]), registry.get(pipeline), settings, roots)
            found.append(("item", (item.inputs, item.ref)))
        except VlbatchError as exc:
            found.append((exc.code, exc.message))
    return found


def _both(lines: list[bytes], pipeline: str, tree: Path, monkeypatch: pytest.MonkeyPatch) -> list[Outcome]:
    quick = _read(lines, pipeline, tree)
    with monkeypatch.context() as m:
        _whole(m)
        whole = _read(lines, pipeline, tree)
    for line, a, b in zip(lines, quick, whole, strict=True):
        assert a == b, line
    return quick


def _image_lines(tree: Path) -> list[bytes]:
    root = tree / "root"
    shapes: list[Any] = [{"images": [p]} for p in _paths(tree)]
    shapes += [{"images": [p], "ref": "r"} for p in _paths(tree)[:5]]
    shapes += [
        {"images": [f"{root}/a.jpg", f"{root}/out.jpg"]},  # the second image refuses the item
        {"images": [f"{root}/a.jpg"] * 256},
        {"images": [f"{root}/a.jpg"] * 257},  # over VLBATCH_MAX_IMAGES_PER_ITEM
        {"images": [f"{root}/{'x' * 4200}.jpg"]},  # over VLBATCH_MAX_SOURCE_CHARS
        {"images": ["data:image/png;base64," + "A" * 5000]},
        {"images": [f"{root}/a.jpg"], "ref": None},
        {"ref": "r", "images": [f"{root}/a.jpg"]},
        {"images": [f"{root}/a.jpg"], "ref": "é" * MAX_REF_CHARS},
        {"images": [f"{root}/a.jpg"], "ref": "😀" * MAX_REF_CHARS},
        {"images": [f"{root}/a.jpg"], "ref": "r" * (MAX_REF_CHARS + 1)},
        {"images": [f"{root}/a.jpg"], "ref": ""},
        {"images": [f"{root}/a.jpg"], "ref": 5},
        {"images": [f"{root}/a.jpg"], "ref": True},
        {"images": [f"{root}/a.jpg"], "ref": ["r"]},
        {"images": [f"{root}/a.jpg"], "ref": {"r": 1}},
        {"images": []},
        {"images": None},
        {"images": f"{root}/a.jpg"},
        {"images": [5]},
        {"images": [f"{root}/a.jpg", None]},
        {"images": [[f"{root}/a.jpg"]]},
        {"images": [f"{root}/a.jpg"], "extra": 1},
        {"images": [f"{root}/a.jpg"], "ref": "r", "extra": None},
        {"Images": [f"{root}/a.jpg"]},
        {"ref": "r"},
        {},
        {"path": f"{root}/a.jpg"},
        {"images": [f"{root}/a\x00.jpg"]},
        {"images": [f"{root}/a.jpg"], "ref": "r\x00"},
        {"images": [f"{root}/a.jpg"], "r\x00": 1},
        {"images": [f"{root}/new\nline.jpg"], "ref": "tab\there"},
        [f"{root}/a.jpg"],
        f"{root}/a.jpg",
        None,
        5,
    ]
    lines = [json.dumps(s).encode() for s in shapes]
    lines += [json.dumps(s, ensure_ascii=False).encode() for s in shapes if isinstance(s, dict)]
    lines += [
        f'{{"images": ["{root}/a.jpg"], "images": 5}}'.encode(),  # repeated keys: the last one counts
        f'{{"images": 5, "images": ["{root}/a.jpg"]}}'.encode(),
        f'{{"images": ["{root}/a.jpg"], "ref": "\\ud800"}}'.encode(),  # a lone surrogate
        f'{{"images": ["{root}/\\udc00.jpg"]}}'.encode(),
        f'{{"images": ["{root}/\\ud83d\\ude00.jpg"]}}'.encode(),  # a pair: one character
        f'{{"images": ["{root}/\\u0000.jpg"]}}'.encode(),
        f'{{"images": ["{root}/\\/a.jpg"]}}'.encode(),
        f'{{"images": ["{root}/a.jpg"]}} trailing'.encode(),
        f'{{"images": ["{root}/a.jpg"], "ref": NaN}}'.encode(),
        f'{{"images": ["{root}/a.jpg"], "ref": 1e999}}'.encode(),
        f'\t {{"images": ["{root}/a.jpg"]}} \t'.encode(),
        b'\xef\xbb\xbf{"images": ["' + str(root).encode() + b'/a.jpg"]}',  # a BOM
        b'{"images": ["' + str(root).encode() + b'/\xff.jpg"]}',  # not UTF-8
        b'{"images": ["' + str(root).encode() + b'/\xed\xa0\x80.jpg"]}',  # a surrogate encoded
        b'{"images": ["' + str(root).encode() + b'/a.jpg"]',
        b"{not json",
        b"",
    ]
    return lines


def test_image_lines_read_quickly_answer_as_the_model_and_the_whole_resolve(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _image_lines(tree)
    outcomes = _both(lines, "image_tagging", tree, monkeypatch)
    codes = {code for code, _ in outcomes}
    # the lines cover items and every kind of refusal: the model's, the path rule's, the per-item caps'
    assert {"item", "invalid_items", "input_path_refused"} <= codes, codes
    assert sum(code == "item" for code, _ in outcomes) >= 20
    root = tree / "root"
    assert ndjson_items._object(json.dumps({"images": [f"{root}/a.jpg"], "ref": "r"}).encode(), "images") is not None


def test_document_lines_read_quickly_answer_as_the_model_and_the_whole_resolve(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree / "root"
    shapes: list[Any] = [{"path": p} for p in _paths(tree)]
    shapes += [
        {"path": f"{root}/sub/deep/c.pdf", "ref": "doc"},
        {"path": f"{root}/sub/deep/c.pdf", "ref": None},
        {"path": ""},
        {"path": "/" + "p" * (MAX_DOCUMENT_PATH_CHARS - 1)},
        {"path": "/" + "p" * MAX_DOCUMENT_PATH_CHARS},
        {"path": f"{root}/" + "é" * (MAX_DOCUMENT_PATH_CHARS - len(str(root)) - 1)},
        {"path": 5},
        {"path": [f"{root}/a.jpg"]},
        {"path": f"{root}/a.jpg", "ref": "r" * (MAX_REF_CHARS + 1)},
        {"path": f"{root}/a.jpg", "images": []},
        {"images": [f"{root}/a.jpg"]},
        {"path": f"{root}/a\x00.pdf"},
    ]
    lines = [json.dumps(s).encode() for s in shapes] + [json.dumps(s, ensure_ascii=False).encode() for s in shapes]
    outcomes = _both(lines, "summarize", tree, monkeypatch)
    assert {"item", "invalid_items", "input_path_refused"} <= {code for code, _ in outcomes}


def test_one_upload_of_many_lines_keeps_its_answers_with_its_folders_resolved_once(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines of one upload share one ``Confinement``: a folder resolved for one line serves the next ones; the
    items are the same as when every path is resolved whole, and the memo stays within its bound."""
    root = tree / "root"
    names = ["a.jpg", "missing.jpg", "sub/b.jpg", "sub_link/b.jpg", "inner.jpg", "日本 é/😀.jpg", "sub/x.jpg"]
    body = [json.dumps({"images": [f"{root}/{n}"], "ref": f"r{k}"}).encode() for k in range(300) for n in names]
    settings = Settings(allowed_input_roots=[root])
    roots = Roots(inputs=[root], outputs=[])
    monkeypatch.setattr(vlbatch.paths.Confinement, "_FOLDERS_KEPT", 2)  # three folders: the memo starts over
    quick = [(i.inputs, i.ref) for i in item_lines(enumerate(body, 2), registry.get("image_tagging"), settings, roots)]
    with monkeypatch.context() as m:
        _whole(m)
        whole = [
            (i.inputs, i.ref) for i in item_lines(enumerate(body, 2), registry.get("image_tagging"), settings, roots)
        ]
    assert quick == whole and len(quick) == len(body)


_TEXT = st.sampled_from(
    ["a.jpg", "é", "😀", "\x00", "\n", '"', "\\", "", "r" * MAX_REF_CHARS, "r" * (MAX_REF_CHARS + 1)]
)
_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _TEXT, st.lists(_TEXT, max_size=3)
)


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    obj=st.dictionaries(st.sampled_from(["images", "ref", "path", "x"]), _VALUE, max_size=3),
    ascii_only=st.booleans(),
)
def test_any_line_of_these_keys_reads_as_its_model_reads_it(obj: dict[str, Any], ascii_only: bool) -> None:
    line = json.dumps(obj, ensure_ascii=ascii_only).encode()
    assert _answer(image_line, line) == _answer(lambda b: _as_pair(ItemIn.model_validate_json(b)), line)
    assert _answer(document_line, line) == _answer(lambda b: _as_pair(DocumentIn.model_validate_json(b)), line)


def _as_pair(model: ItemIn | DocumentIn) -> tuple[Any, str | None]:
    return (model.images if isinstance(model, ItemIn) else model.path), model.ref


def _answer(read: Any, line: bytes) -> Outcome:
    try:
        return "read", read(line)
    except ValidationError as exc:
        return "refused", [(e["type"], e["loc"], e["msg"]) for e in exc.errors()]
