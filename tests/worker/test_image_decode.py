"""Image decoding in decoder child processes (``VLBATCH_IMAGE_DECODE_ISOLATION=process``): the same pixels as in
the worker's threads, and a decoder that crashes, hangs or balloons fails one image with its code while the
caller and the other images go on."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from benchmarks.dng_sample import dng_bytes
from benchmarks.hostile_api.decoders import animated_jxl
from engine.vision import VisionGeometry
from preprocessing.documents.sandbox import ParseBounds, Sandbox, close_shared_sandboxes
from preprocessing.formats import heif
from preprocessing.input_errors import InputError
from tests.support import decode_faults
from vlbatch.db.tenants import global_roots
from vlbatch.settings import Settings
from worker import image_decode
from worker.image_decode import IsolatedDecoder, decode_in_thread, image_decoder
from worker.image_prep import prepare_images

pytestmark = pytest.mark.timeout(180)

MiB = 1024**2
BUDGET = {"factor": 28, "min_pixels": 56 * 56, "max_pixels": 256 * 28 * 28}


def _photo(fmt: str, size: tuple[int, int], mode: str = "RGB", orientation: int = 1) -> bytes:
    img = Image.linear_gradient("L").resize(size).convert(mode)
    out = io.BytesIO()
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    if fmt == "DNG":
        return dng_bytes(img.convert("RGB"))
    if fmt == "JXL":
        import imagecodecs
        import numpy as np

        return bytes(imagecodecs.jpegxl_encode(np.asarray(img.convert("RGB"))))
    if fmt == "HEIF":
        heif.register()
    img.save(out, fmt, exif=exif.tobytes()) if fmt == "JPEG" else img.save(out, fmt)
    return out.getvalue()


# Deadlines: only the hang's own test is about one (HANG_DEADLINE_S); every other decode gets a deadline a slow or busy
# CI host cannot reach, so a child started late never reads as a timeout.
HANG_DEADLINE_S = 3.0
SLACK_DEADLINE_S = 120.0


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox(ParseBounds(memory_bytes=512 * MiB, timeout_s=SLACK_DEADLINE_S, tasks_per_child=1000))
    yield box
    box.close()


@pytest.mark.parametrize(
    "data",
    [
        _photo("JPEG", (1200, 900), orientation=6),
        _photo("PNG", (640, 480), mode="RGBA"),
        _photo("PNG", (300, 200), mode="P"),
        _photo("HEIF", (640, 480)),
        _photo("JXL", (640, 480)),
        _photo("DNG", (640, 480)),
    ],
    ids=["exif-rotated-jpeg", "rgba-png", "palette-png", "heic", "jpeg-xl", "dng"],
)
def test_a_child_decodes_the_same_pixels_as_a_thread(sandbox: Sandbox, data: bytes) -> None:
    here = decode_in_thread(data, what="x", **BUDGET)
    there = IsolatedDecoder(sandbox)(data, what="x", **BUDGET)
    assert there.mode == "RGB" and there.size == here.size and there.tobytes() == here.tobytes()
    assert there.info["photo"] == here.info["photo"] and there.info["photo"]["width"] > 0  # the facts come back too


def test_crashes_hangs_and_balloons_fail_one_image_each_and_the_next_decodes(sandbox: Sandbox) -> None:
    good = _photo("JPEG", (640, 480))
    short = Sandbox(ParseBounds(memory_bytes=512 * MiB, timeout_s=HANG_DEADLINE_S, tasks_per_child=1000))
    cases = [(sandbox, decode_faults.segfault, "decode_crashed", "SIGSEGV")]
    cases.append((short, decode_faults.hang, "decode_timeout", "3 s"))
    cases.append((sandbox, decode_faults.balloon, "decode_memory", "512 MiB"))
    try:
        for box, fault, code, words in cases:
            started = time.monotonic()
            with pytest.raises(InputError) as err:
                IsolatedDecoder(box, decode=fault)(good, what="image 'a.jpg'", **BUDGET)
            assert err.value.code == code and words in err.value.message and "a.jpg" in err.value.message
            assert time.monotonic() - started < HANG_DEADLINE_S + 60  # a deadline, plus starting a child on a busy host
            assert (
                IsolatedDecoder(sandbox)(good, what="next", **BUDGET).size
                == decode_in_thread(good, what="", **BUDGET).size
            )
    finally:
        short.close()


def test_a_bad_file_keeps_its_own_code_in_a_child(sandbox: Sandbox) -> None:
    truncated = _photo("PNG", (640, 480))[:200]
    with pytest.raises(InputError) as in_thread:
        decode_in_thread(truncated, what="x", **BUDGET)
    with pytest.raises(InputError) as in_child:
        IsolatedDecoder(sandbox)(truncated, what="x", **BUDGET)
    assert in_child.value.code == in_thread.value.code


def test_the_worker_decodes_in_a_child_when_asked_and_a_crash_fails_only_that_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.jpg").write_bytes(_photo("JPEG", (800, 600)))
    settings = Settings(
        allowed_input_roots=[tmp_path], image_decode_isolation="process", image_decode_timeout_s=SLACK_DEADLINE_S
    )
    kw = {
        "geometry": VisionGeometry(),
        "settings": settings,
        "roots": global_roots(settings),
        "max_visual_tokens": 64,
        "limit": 4,
    }
    try:
        decoder = image_decoder(settings)
        assert isinstance(decoder, IsolatedDecoder)
        assert image_decoder(settings).sandbox is decoder.sandbox  # one pool per process
        (image,) = prepare_images([str(tmp_path / "a.jpg")], **kw)  # type: ignore[arg-type]
        assert image.size == decode_in_thread((tmp_path / "a.jpg").read_bytes(), what="", **_budget_of(kw)).size
        with monkeypatch.context() as patched:
            patched.setattr(image_decode, "decode_rgb_bytes", decode_faults.segfault)  # the next file crashes
            with pytest.raises(InputError) as err:
                prepare_images([str(tmp_path / "a.jpg")], **kw)  # type: ignore[arg-type]
        assert err.value.code == "decode_crashed" and "a.jpg" in err.value.message
        assert len(prepare_images([str(tmp_path / "a.jpg")] * 2, **kw)) == 2  # type: ignore[arg-type]
    finally:
        close_shared_sandboxes()


def _budget_of(kw: dict[str, object]) -> dict[str, int]:
    from preprocessing.images import budget_pixels

    geo = VisionGeometry()
    max_px = min(budget_pixels(64, patch_size=geo.patch_size, merge_size=geo.merge_size), geo.max_pixels)
    return {"factor": geo.factor, "min_pixels": min(max_px, geo.min_pixels), "max_pixels": max_px}


def test_an_animated_jpeg_xl_of_64_frames_of_4096_squared_fits_a_512_mib_decoder() -> None:
    """Every frame at once is 1 GiB (64 x 4096 x 4096 grey), over the cap; the first frame alone is well under."""
    data = animated_jxl(frames=64, side=4096)  # 1.2 MB
    box = Sandbox(ParseBounds(memory_bytes=512 * MiB, timeout_s=120.0, tasks_per_child=10))
    try:
        out = IsolatedDecoder(box)(data, what="anim.jxl", **BUDGET)
    finally:
        box.close()
    assert out.size == (448, 448) and out.info["photo"]["width"] == 4096
