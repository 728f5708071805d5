"""Hostile-client probes: image files built to make a worker's decoder do more than the pixel guard allowed.

Each file goes through ``decode_for_budget`` (the worker's thread mode, where nothing but the guard bounds a
decoder) in a child process of its own, whose peak resident memory is the figure printed. The files are built
here, by the encoders the tests use too (``tests/preprocessing/test_formats.py``, ``tests/worker``):

- an animated JPEG XL of 64 frames of 4096 x 4096: one frame encoded by libjxl, repeated by hand;
- a JPEG XL container whose ``jxlp`` part holds a 10000 x 10000 codestream and whose ``jxlc`` box a 64 x 64 one
  (libjxl joins them and decodes the first);
- garbage after a JPEG XL signature, and a HEIC whose ``ispe`` box declares less than its stream holds.

The API process the runner starts is not used: no route decodes a client's pixels.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from benchmarks.hostile_api import Row, Target

ENV: dict[str, str] = {"VLBATCH_API_RECONCILE": "false"}

MiB = 1024**2
PEAK_LIMIT = 400 * MiB  # one 4096 x 4096 frame and libjxl's working buffers; every frame would be over 1 GiB
_SIGNATURE = b"\x00\x00\x00\x0cJXL \x0d\x0a\x87\x0a"
_BUDGET = {"factor": 28, "min_pixels": 56 * 56, "max_pixels": 1024 * 28 * 28}


def _box(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(body), kind) + body


def animated_jxl(frames: int = 64, side: int = 4096) -> bytes:
    """An animation of ``frames`` identical grey frames of ``side`` x ``side``, without encoding them all.

    libjxl writes an animation as its headers, each frame, and a last frame flagged as such; two and three frame
    encodings differ by one whole middle frame, found where the longer one splits into the shorter one around
    it, and repeated."""
    import imagecodecs
    import numpy as np

    def encode(n: int) -> bytes:
        return bytes(imagecodecs.jpegxl_encode(np.zeros((n, side, side), np.uint8), effort=1, numthreads=1))

    two, three = encode(2), encode(3)
    step = len(three) - len(two)
    for cut in range(len(two) + 1):
        if three[:cut] == two[:cut] and three[cut + step :] == two[cut:]:
            return two[:cut] + three[cut : cut + step] * (frames - 2) + two[cut:]
    raise AssertionError("libjxl's animation did not split into repeated frames")


def jxlp_then_jxlc(big: int = 10000, small: int = 64) -> bytes:
    """A container whose first codestream part (``jxlp``, not flagged last) holds a ``big`` x ``big`` image and
    whose ``jxlc`` box a ``small`` x ``small`` one: libjxl joins the parts and decodes the big one."""
    import imagecodecs
    import numpy as np

    def encode(side: int) -> bytes:
        return bytes(imagecodecs.jpegxl_encode(np.full((side, side), 90, np.uint8), effort=1, numthreads=1))

    ftyp = _box(b"ftyp", b"jxl \x00\x00\x00\x00jxl ")
    return _SIGNATURE + ftyp + _box(b"jxlp", struct.pack(">I", 0) + encode(big)) + _box(b"jxlc", encode(small))


def jxl_garbage() -> bytes:
    """A JPEG XL codestream signature, a header that parses, then nothing libjxl can decode."""
    return b"\xff\x0a" + bytes(range(256)) * 4


def heic_past_ispe() -> bytes:
    """A HEIC whose ``ispe`` box declares 64 x 64 over a 256 x 256 stream."""
    from PIL import Image

    from preprocessing.formats import heif

    heif.register()
    buf = io.BytesIO()
    Image.linear_gradient("L").resize((256, 256)).convert("RGB").save(buf, "HEIF")
    data = bytearray(buf.getvalue())
    at = data.find(b"ispe")
    struct.pack_into(">II", data, at + 8, 64, 64)
    return bytes(data)


_CHILD = """
import json, sys
from preprocessing.input_errors import InputError
from preprocessing.images import decode_for_budget
data = open(sys.argv[1], "rb").read()
try:
    img = decode_for_budget(data, **json.loads(sys.argv[2]))
    out = {"code": "ok", "size": list(img.size)}
except InputError as exc:
    out = {"code": exc.code, "message": exc.message[:120]}
except Exception as exc:  # what the worker's feeder answers as preprocess_error
    out = {"code": "preprocess_error", "message": repr(exc)[:120]}
# VmHWM, not ru_maxrss: ru_maxrss keeps the peak of the process this one was forked from.
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
out["peak"] = int(hwm.split()[1]) * 1024
print(json.dumps(out))
"""


def decode_in_child(data: bytes) -> dict[str, object]:
    """``decode_for_budget`` with the worker's default guard in a fresh process: its code and peak RSS (bytes)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input"
        path.write_bytes(data)
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), json.dumps(_BUDGET)], capture_output=True, text=True, timeout=600
        )
    if done.returncode != 0:
        return {"code": f"child died ({done.returncode})", "peak": 0, "message": done.stderr[-200:]}
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _got(result: dict[str, object]) -> str:
    peak = int(str(result.get("peak", 0))) / MiB
    detail = result.get("size") or result.get("message", "")
    return f"{result['code']} {detail}, peak RSS {peak:.0f} MiB"


def probes(target: Target) -> Iterator[Row]:
    del target  # the files go to a decoder, not to the API
    anim = animated_jxl()
    r = decode_in_child(anim)
    yield Row(
        "H7 animated JPEG XL",
        f"64 frames of 4096x4096, {len(anim) / 1024:.0f} KiB",
        _got(r),
        r["code"] == "ok" and int(str(r["peak"])) < PEAK_LIMIT,
    )
    hidden = jxlp_then_jxlc()
    r = decode_in_child(hidden)
    yield Row(
        "M3 jxlp of 10000x10000 before a jxlc of 64x64",
        f"JPEG XL container, {len(hidden)} bytes",
        _got(r),
        r["code"] == "image_bomb",
    )
    for name, data in (("L4 garbage after a JPEG XL signature", jxl_garbage()), ("L4 HEIC past its ispe", None)):
        data = data if data is not None else heic_past_ispe()
        r = decode_in_child(data)
        yield Row(name, f"{len(data)} bytes", _got(r), r["code"] == "decode_error")
