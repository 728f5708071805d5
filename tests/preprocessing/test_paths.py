"""Client-named paths: escapes are refused, special files inside a root are refused without blocking, and the
directory scan lists regular files only, however odd the tree. Every call that could block runs under a
watchdog that fails the test instead of hanging it."""

from __future__ import annotations

import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from preprocessing import paths
from preprocessing.documents import DocumentLimits, hash_file, load_document
from preprocessing.images import load_source
from preprocessing.input_errors import InputError
from vlbatch.inputs import iter_files, iter_images

T = TypeVar("T")
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


def _within(seconds: float, fn: Callable[[], T]) -> T:
    """``fn()``'s result, or a test failure if it has not returned after ``seconds`` (it would block)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test below
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"blocked for more than {seconds} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _code(fn: Callable[[], object]) -> str:
    with pytest.raises(InputError) as ei:
        _within(5, fn)
    return ei.value.code


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    """A root with one good image and every kind of trap; a FIFO writer is never started."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "good.png").write_bytes(PNG)
    (root / "sub" / "deep.png").write_bytes(PNG)
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG)
    os.mkfifo(root / "fifo.png")
    (root / "to-fifo.png").symlink_to(root / "fifo.png")
    (root / "escape.png").symlink_to(secret)
    (root / "zero.png").symlink_to("/dev/zero")
    (root / "up").symlink_to("/")
    (root / "sub" / "loop").symlink_to(root)
    (root / "dir.png").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "socket.png"))
    if os.geteuid() == 0:  # a device node of /dev/null's numbers, made inside the root
        os.mknod(root / "device.png", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    try:
        yield root
    finally:
        sock.close()


def _load(source: str, root: Path, max_bytes: int = 10_000) -> bytes:
    return load_source(source, allowed_roots=[root], max_bytes=max_bytes, url_timeout_s=5)


def test_a_regular_file_inside_the_root_is_read(tree: Path) -> None:
    assert _within(5, lambda: _load(str(tree / "good.png"), tree)) == PNG
    assert _within(5, lambda: _load(f"file://{tree}/sub/../good.png", tree)) == PNG


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("../secret.png", "outside_roots"),
        ("sub/../../secret.png", "outside_roots"),
        ("escape.png", "outside_roots"),
        ("zero.png", "outside_roots"),
        ("up/etc/passwd", "outside_roots"),
        ("fifo.png", "not_regular_file"),
        ("to-fifo.png", "not_regular_file"),
        ("socket.png", "not_regular_file"),
        ("dir.png", "not_regular_file"),
        ("missing.png", "not_found"),
    ],
)
def test_escapes_and_special_files_are_refused_without_blocking(tree: Path, name: str, code: str) -> None:
    source = str(tree / name)
    assert _code(lambda: _load(source, tree)) == code


def test_a_path_through_a_symlink_cycle_that_ends_inside_the_root_is_that_file(tree: Path) -> None:
    assert _within(5, lambda: _load(str(tree / "sub/loop/sub/loop/good.png"), tree)) == PNG


def test_absolute_paths_outside_every_root_are_refused(tree: Path) -> None:
    for source in ["/etc/passwd", "/dev/zero", "/proc/self/environ", f"file://{tree.parent}/secret.png"]:
        assert _code(lambda: _load(source, tree)) == "outside_roots", source  # noqa: B023


def test_a_nul_byte_in_a_path_is_a_coded_error(tree: Path) -> None:
    assert _code(lambda: _load(f"{tree}/good.png\0.png", tree)) == "not_found"


def test_a_device_node_inside_the_root_is_refused(tree: Path) -> None:
    if not (tree / "device.png").exists():
        pytest.skip("making a device node needs root")
    assert _code(lambda: _load(str(tree / "device.png"), tree)) == "not_regular_file"


def test_a_fifo_swapped_in_after_the_check_cannot_block_the_open(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The stat before opening is made to see a regular file (as it would have, a moment before the swap);
    # the non-blocking open and the fstat after it are what must hold.
    real_stat = os.stat
    regular = real_stat(tree / "good.png")
    monkeypatch.setattr(paths.os, "stat", lambda p, *a, **k: regular if str(p).endswith("fifo.png") else real_stat(p))
    with pytest.raises(InputError) as ei:
        _within(5, lambda: paths.read_regular_file(tree / "fifo.png", max_bytes=100))
    assert ei.value.code == "not_regular_file" and "became a FIFO" in ei.value.message


def test_documents_refuse_special_files_without_blocking(tree: Path) -> None:
    (tree / "fifo.txt").symlink_to(tree / "fifo.png")
    assert _code(lambda: load_document(tree / "fifo.txt")) == "not_regular_file"
    assert _code(lambda: hash_file(tree / "fifo.txt")) == "not_regular_file"
    (tree / "big.txt").write_text("word " * 100)
    assert _code(lambda: load_document(tree / "big.txt", limits=DocumentLimits(max_bytes=100))) == "file_too_large"


def test_the_directory_scan_lists_regular_files_only_and_never_blocks(tree: Path) -> None:
    found = _within(10, lambda: list(iter_images(tree, recursive=True, roots=[tree])))
    assert found == [tree / "good.png", tree / "sub" / "deep.png"]
    flat = _within(10, lambda: list(iter_files(tree, suffixes={".png"}, recursive=False, roots=[tree])))
    assert flat == [tree / "good.png"]


def _globbed(folder: Path, suffixes: set[str], recursive: bool, roots: list[Path]) -> list[Path]:
    """The listing as a plain glob gives it, resolving every file: what the scan must equal."""
    found = []
    for p in sorted(folder.glob("**/*" if recursive else "*")):
        if p.suffix.lower() in suffixes and p.is_file():
            real = p.resolve()
            if any(real.is_relative_to(r.resolve()) for r in roots):
                found.append(real)
    return found


@pytest.mark.parametrize("recursive", [True, False])
def test_the_directory_scan_equals_a_plain_glob_of_the_tree(tmp_path: Path, recursive: bool) -> None:
    import random

    rng = random.Random(7)
    root = tmp_path / "album"
    outside = tmp_path / "outside.jpg"
    outside.write_bytes(b"x")
    # Names whose string order differs from path order ("a-b/..." sorts before "a/..." as text, after as a path).
    folders = [root, root / "a", root / "a-b", root / "a" / "b", root / "a.b", root / ".hidden", root / "Z"]
    for f in folders:
        f.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(120):
        name = f"{rng.choice(['img', 'IMG', 'a', 'a-b', '.x'])}{i}{rng.choice(['.jpg', '.JPG', '.png', '.txt', ''])}"
        path = rng.choice(folders) / name
        path.write_bytes(b"x")
        files.append(path)
    (root / "a" / "in.jpg").symlink_to(files[3])  # a link inside the root: listed as its target
    (root / "a" / "out.jpg").symlink_to(outside)  # a link out of the root: skipped
    (root / "a" / "dangling.jpg").symlink_to(root / "missing.jpg")
    (root / "linked-dir").symlink_to(root / "a")  # a linked folder: not entered
    suffixes = {".jpg", ".png"}
    listed = list(iter_files(root, suffixes=suffixes, recursive=recursive, roots=[tmp_path / "album"]))
    assert listed == _globbed(root, suffixes, recursive, [root])
    assert outside not in listed and len(listed) > 10


def test_outside_the_roots_an_existing_file_and_a_missing_one_answer_alike(tree: Path) -> None:
    """No existence oracle: the roots are checked before anything is looked up."""
    exists, missing = tree.parent / "secret.png", tree.parent / "none.png"
    assert exists.exists() and not missing.exists()
    codes = {_code(lambda: paths.confined_path(str(p), [tree])) for p in (exists, missing)}  # noqa: B023
    assert codes == {"outside_roots"}
    climbing = f"{tree}/../secret.png"  # a .. out of the root, folded before any lookup
    assert _code(lambda: paths.confined_path(climbing, [tree])) == "outside_roots"
