"""How close 12 MP JPEG -> 1024 visual tokens gets to the JPEG decode itself, and threads vs processes.

Writes a 4000x3000 photo-like JPEG (smooth gradients plus coarse and fine noise, quality 90) to a temp dir,
then prints, in one run, median-of-REPEATS milliseconds for: a full decode; the DCT-scaled decode at the
smallest scale covering the 1008x756 grid (``draft("RGB", (1008, 756))`` + load, 1/2; libvips' shrink-on-load
decode and libjpeg-turbo's own, through simplejpeg, at the same scale); ``decode_for_budget`` at 1024 tokens
(factor 28) on its fast path (libjpeg-turbo decode + libvips resize) and on its Pillow-only path; the previous
path (``decode_image`` with a 2x draft + ``prepare_image``); and the ratios decode_for_budget / DCT decode.
The cases run interleaved so load on the machine hits them alike.

It also prices the final resize per filter (what each would make the ratio, and its PSNR against a
full-resolution BICUBIC resize, on the photo and on a rendered-text page), and the throughput of 32
decode_for_budget calls on 1 thread, ThreadPoolExecutor(2, 4) and ProcessPoolExecutor(2). Pool workers
return the image, as the worker's prepare step does, so the processes pay for pickling it back.

Then, for the photo formats decoded outside Pillow's JPEG path, a 3000x2000 photo (the same generator) as
HEIC (pillow-heif), JPEG XL (imagecodecs) and DNG with a 1536x1024 embedded JPEG preview
(``benchmarks/dng_sample.py``), each to 1024 tokens: ``decode_for_budget`` against the format's bare decoder
(a full decode; for the DNG, LibRaw's preview extraction plus a full Pillow decode of it, and the half-size
demosaic the preview spares).

Usage: python benchmarks/preprocess_images.py [REPEATS]   (default 9)
"""

from __future__ import annotations

import io
import math
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

from PIL import Image, ImageChops, ImageDraw, ImageStat

from benchmarks.dng_sample import dng_bytes
from preprocessing import turbo, vips
from preprocessing.formats import heif
from preprocessing.images import budget_pixels, decode_for_budget, decode_image, prepare_image

SIZE = (4000, 3000)
GRID = (1008, 756)  # smart_resize(3000, 4000) at 1024 tokens, factor 28
FACTOR = 28
MIN_PIXELS = 56 * 56
MAX_PIXELS = budget_pixels(1024, patch_size=14, merge_size=2)
BATCH = 32
FILTERS = {
    "BICUBIC": Image.Resampling.BICUBIC,
    "HAMMING": Image.Resampling.HAMMING,
    "BILINEAR": Image.Resampling.BILINEAR,
    "BOX": Image.Resampling.BOX,
}


def photo_like(size: tuple[int, int]) -> Image.Image:
    """Smooth colour gradients under coarse blotches and fine grain: compresses like a photo, not a flat image."""
    w, h = size
    red = Image.linear_gradient("L").resize(size, Image.Resampling.BILINEAR)
    green = Image.radial_gradient("L").resize(size, Image.Resampling.BILINEAR)
    blue = Image.linear_gradient("L").rotate(90).resize(size, Image.Resampling.BILINEAR)
    coarse = Image.effect_noise((w // 8, h // 8), 60).resize(size, Image.Resampling.BICUBIC)
    fine = Image.effect_noise(size, 20)
    texture = Image.merge("RGB", (coarse, fine, ImageChops.add(coarse, fine, 2.0)))
    return Image.blend(Image.merge("RGB", (red, green, blue)), texture, 0.35)


def text_page(size: tuple[int, int]) -> Image.Image:
    """Lines of small dark text: where a soft resampling filter loses the most."""
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    for y in range(0, size[1], 40):
        draw.text((10, y), "The quick brown fox jumps over the lazy dog 0123456789 " * 4, fill="black", font_size=30)
    return img


def jpeg_file(img: Image.Image, path: Path) -> bytes:
    img.save(path, format="JPEG", quality=90)
    return path.read_bytes()


def full_decode(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def dct_decode(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.draft("RGB", GRID)
    img.load()
    return img


def for_budget(data: bytes) -> Image.Image:
    return decode_for_budget(data, factor=FACTOR, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)


def pillow_only(data: bytes) -> Image.Image:
    """decode_for_budget as it runs where libvips is not installed."""
    real = vips._vips
    vips._vips = lambda: None
    try:
        return for_budget(data)
    finally:
        vips._vips = real


def vips_dct_decode(data: bytes) -> bytes:
    """libvips' shrink-on-load decode at the covering scale, pixels in memory (no resize)."""
    import pyvips

    return bytes(pyvips.Image.new_from_buffer(data, "", shrink=2, access="sequential").write_to_memory())


def turbo_dct_decode(data: bytes) -> object:
    """libjpeg-turbo's own decode (simplejpeg) at the covering scale, 1/2, no resize."""
    return turbo.decode_scaled(data, shrink=2)


def previous_path(data: bytes) -> Image.Image:
    side = 2 * math.isqrt(MAX_PIXELS)
    img = decode_image(data, draft_size=(side, side))
    return prepare_image(img, factor=FACTOR, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)


def medians_ms(cases: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall time per case; one call of each case per round so drifting load is shared."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():  # warm-up: first-touch allocations, lazy plugin imports
        fn()
    for _ in range(repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(ts) for name, ts in times.items()}


def resizer(img: Image.Image, resample: Image.Resampling) -> Callable[[], Image.Image]:
    return lambda: img.resize(GRID, resample)


def psnr(a: Image.Image, b: Image.Image) -> float:
    sq = ImageStat.Stat(ImageChops.difference(a, b)).sum2
    mse = sum(sq) / (len(sq) * a.width * a.height)
    return 10 * math.log10(255**2 / mse) if mse else math.inf


def images_per_s(executor: Executor, data: bytes, n: int) -> float:
    list(executor.map(for_budget, [data] * 2))  # start the workers outside the timed part
    start = time.perf_counter()
    done = list(executor.map(for_budget, [data] * n))
    elapsed = time.perf_counter() - start
    assert all(img.size == GRID for img in done)
    return n / elapsed


FORMAT_SIZE = (3000, 2000)
PREVIEW_SIZE = (1536, 1024)


def heic_full(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data), formats=(heif.FORMAT,))
    img.load()
    return img


def jxl_full(data: bytes) -> object:
    import imagecodecs

    return imagecodecs.jpegxl_decode(data, numthreads=1)


def raw_preview_full(data: bytes) -> Image.Image:
    import rawpy

    with rawpy.imread(io.BytesIO(data)) as raw:
        thumb = raw.extract_thumb()
        assert isinstance(thumb.data, bytes)  # a JPEG preview, not a bitmap
        img = Image.open(io.BytesIO(thumb.data))
        img.load()
        return img


def raw_half_demosaic(data: bytes) -> object:
    import rawpy

    with rawpy.imread(io.BytesIO(data)) as raw:
        return raw.postprocess(half_size=True, use_camera_wb=True, output_bps=8)


def format_rows(repeats: int) -> None:
    """decode_for_budget on HEIC, JPEG XL and a DNG's preview against each format's bare decoder."""
    import imagecodecs
    import numpy as np

    heif.register()
    picture = photo_like(FORMAT_SIZE)
    buf = io.BytesIO()
    picture.save(buf, "HEIF", quality=80)
    heic = buf.getvalue()
    jxl = bytes(imagecodecs.jpegxl_encode(np.asarray(picture), distance=1.0, effort=3))
    dng = dng_bytes(picture, preview_size=PREVIEW_SIZE)
    grid = (1092, 728)  # smart_resize(2000, 3000) at 1024 tokens
    for data in (heic, jxl, dng):
        assert for_budget(data).size == grid
    print(
        f"{FORMAT_SIZE[0]}x{FORMAT_SIZE[1]} photo -> {grid[0]}x{grid[1]} (1024 tokens): HEIC {len(heic) / 1e6:.2f} MB,"
        f" JPEG XL {len(jxl) / 1e6:.2f} MB, DNG {len(dng) / 1e6:.1f} MB with a {PREVIEW_SIZE[0]}x{PREVIEW_SIZE[1]}"
        " JPEG preview"
    )
    cases: dict[str, Callable[[], object]] = {
        "HEIC full decode (pillow-heif)": lambda: heic_full(heic),
        "HEIC decode_for_budget": lambda: for_budget(heic),
        "JPEG XL full decode (libjxl, 1 thread)": lambda: jxl_full(jxl),
        "JPEG XL decode_for_budget": lambda: for_budget(jxl),
        "DNG preview extract + full decode": lambda: raw_preview_full(dng),
        "DNG half-size demosaic (LibRaw)": lambda: raw_half_demosaic(dng),
        "DNG decode_for_budget (preview path)": lambda: for_budget(dng),
    }
    ms = medians_ms(cases, repeats)
    for name, value in ms.items():
        print(f"  {name:<40} {value:8.1f} ms")
    pairs = [
        ("HEIC", "HEIC decode_for_budget", "HEIC full decode (pillow-heif)"),
        ("JPEG XL", "JPEG XL decode_for_budget", "JPEG XL full decode (libjxl, 1 thread)"),
        ("DNG", "DNG decode_for_budget (preview path)", "DNG preview extract + full decode"),
        ("DNG vs demosaic", "DNG decode_for_budget (preview path)", "DNG half-size demosaic (LibRaw)"),
    ]
    for label, ours, bare in pairs:
        print(f"  ratio {label} decode_for_budget / bare decoder {ms[ours] / ms[bare]:11.2f}")


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    with tempfile.TemporaryDirectory() as tmp:
        photo = jpeg_file(photo_like(SIZE), Path(tmp) / "photo.jpg")
        text = jpeg_file(text_page(SIZE), Path(tmp) / "text.jpg")
    assert for_budget(photo).size == GRID and dct_decode(photo).size == (2000, 1500)
    print(f"{SIZE[0]}x{SIZE[1]} JPEG q90, {len(photo) / 1e6:.2f} MB -> {GRID[0]}x{GRID[1]} (1024 tokens)")

    cases: dict[str, Callable[[], object]] = {
        "full decode": lambda: full_decode(photo),
        "DCT decode 1/2, Pillow (covers grid)": lambda: dct_decode(photo),
        "decode_for_budget": lambda: for_budget(photo),
        "decode_for_budget, Pillow only": lambda: pillow_only(photo),
        "previous: decode_image + prepare_image": lambda: previous_path(photo),
    }
    if vips.available():
        cases["DCT decode 1/2, libvips (covers grid)"] = lambda: vips_dct_decode(photo)
    else:
        print("  (pyvips not importable: decode_for_budget runs on Pillow only)")
    if turbo.available():
        cases["DCT decode 1/2, libjpeg-turbo (covers)"] = lambda: turbo_dct_decode(photo)
    ms = medians_ms(cases, repeats)
    for name, value in ms.items():
        print(f"  {name:<40} {value:8.1f} ms")
    dct = ms["DCT decode 1/2, Pillow (covers grid)"]
    print(f"  ratio decode_for_budget / Pillow DCT decode       {ms['decode_for_budget'] / dct:6.2f}  (target <= 1.20)")
    if "DCT decode 1/2, libvips (covers grid)" in ms:
        ratio = ms["decode_for_budget"] / ms["DCT decode 1/2, libvips (covers grid)"]
        print(f"  ratio decode_for_budget / libvips DCT decode      {ratio:6.2f}")
    if "DCT decode 1/2, libjpeg-turbo (covers)" in ms:
        ratio = ms["decode_for_budget"] / ms["DCT decode 1/2, libjpeg-turbo (covers)"]
        print(f"  ratio decode_for_budget / libjpeg-turbo DCT decode {ratio:5.2f}")
    print(f"  ratio Pillow-only path / Pillow DCT decode        {ms['decode_for_budget, Pillow only'] / dct:6.2f}")
    if vips.available():
        scaled_vips = for_budget(text)
        ref_text = full_decode(text).resize(GRID, Image.Resampling.BICUBIC)
        ref_photo = full_decode(photo).resize(GRID, Image.Resampling.BICUBIC)
        print(
            f"  libvips path quality: PSNR photo {psnr(for_budget(photo), ref_photo):5.1f} dB"
            f"  PSNR text {psnr(scaled_vips, ref_text):5.1f} dB (against a full-resolution BICUBIC resize)"
        )

    format_rows(max(3, repeats // 2))

    print(f"Pillow's final resize 2000x1500 -> {GRID[0]}x{GRID[1]} by filter (its path uses BICUBIC):")
    scaled = {"photo": dct_decode(photo), "text": dct_decode(text)}
    encoded = {"photo": photo, "text": text}
    reference = {kind: full_decode(data).resize(GRID, Image.Resampling.BICUBIC) for kind, data in encoded.items()}
    resize_ms = medians_ms({name: resizer(scaled["photo"], f) for name, f in FILTERS.items()}, repeats)
    for name, f in FILTERS.items():
        quality = "  ".join(
            f"PSNR {kind} {psnr(scaled[kind].resize(GRID, f), reference[kind]):5.1f} dB" for kind in scaled
        )
        print(f"  {name:<9} {resize_ms[name]:6.1f} ms  -> ratio ~{(dct + resize_ms[name]) / dct:4.2f}  {quality}")

    print(f"throughput, {BATCH} x decode_for_budget:")
    with ThreadPoolExecutor(1) as pool:
        print(f"  1 thread              {images_per_s(pool, photo, BATCH):6.1f} images/s")
    for workers in (2, 4):
        with ThreadPoolExecutor(workers) as pool:
            print(f"  ThreadPoolExecutor({workers})  {images_per_s(pool, photo, BATCH):6.1f} images/s")
    # spawn: a forked child inherits libvips' and the pool threads' locks in whatever state they were in.
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as procs:
        print(f"  ProcessPoolExecutor(2) {images_per_s(procs, photo, BATCH):6.1f} images/s")


if __name__ == "__main__":
    main()
