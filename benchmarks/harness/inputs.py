"""The benchmark's inputs, written once into a work directory and reused by every arm (and later runs).

Photos are realistic JPEGs (about 340 KB at 1600x1200: a gradient scene with shapes and camera-like
noise, so decoding costs what a real photo's does); the warm-up photos are different pictures in their
own folder, so the timed run finds nothing of them in the engine's prefix cache.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.spec import MODEL_KINDS, BenchSpec

log = logging.getLogger(__name__)

JPEG_QUALITY = 90


@dataclass(frozen=True)
class BenchInputs:
    model_dir: Path
    warmup: list[Path]
    photos: list[Path]  # timed

    @property
    def album(self) -> Path:
        """The timed photos' folder (a job's directory)."""
        return self.photos[0].parent

    @property
    def warmup_album(self) -> Path | None:
        return self.warmup[0].parent if self.warmup else None

    def arm_photos(self) -> list[Path]:
        """What an arm function gets: warm-up photos first, then the timed ones."""
        return [*self.warmup, *self.photos]


def split_warmup(spec: BenchSpec, photos: list[Path]) -> tuple[list[Path], list[Path]]:
    """(warm-up, timed) photos of an arm's ``photos`` argument: the leading photos outside the timed
    photos' folder are the warm-up; in a single folder, the first ``warmup_items * images_per_prompt``."""
    if not photos:
        return [], []
    album = photos[-1].parent
    n = next((i for i, p in enumerate(photos) if p.parent == album), 0)
    if n == 0:
        n = min(spec.warmup_items * spec.images_per_prompt, len(photos) - 1)
    return photos[:n], photos[n:]


def group_items(photos: list[Path], images_per_prompt: int) -> list[list[Path]]:
    """Consecutive photos grouped into items (the last one may hold fewer)."""
    return [photos[i : i + images_per_prompt] for i in range(0, len(photos), images_per_prompt)]


def realistic_photo(index: int, *, size: tuple[int, int], seed: int = 0) -> bytes:
    """One JPEG: a scene from ``benchmarks.scenes`` with low- and high-frequency noise, as a camera gives."""
    import io

    from PIL import Image

    from benchmarks.scenes import SCENES, sample_photo

    w, h = size
    base = sample_photo(SCENES[index % len(SCENES)], seed=seed * 1_000_003 + index, size=size)
    coarse = Image.merge("RGB", [Image.effect_noise((max(w // 4, 1), max(h // 4, 1)), 40) for _ in range(3)])
    img = Image.blend(base, coarse.resize(size, Image.Resampling.BILINEAR), 0.30)
    img = Image.blend(img, Image.effect_noise(size, 12).convert("RGB"), 0.10)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()


def write_photos(folder: Path, count: int, *, size: tuple[int, int], seed: int = 0, first: int = 0) -> list[Path]:
    """``count`` JPEGs in ``folder``; reused when a previous call wrote the same set."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = {"count": count, "size": list(size), "seed": seed, "first": first, "quality": JPEG_QUALITY}
    paths = [folder / f"{first + i:05d}.jpg" for i in range(count)]
    stamp_file = folder / "photos.json"
    if stamp_file.is_file() and json.loads(stamp_file.read_text()) == stamp and all(p.is_file() for p in paths):
        return paths
    for stale in folder.glob("*.jpg"):
        stale.unlink()

    def write(i: int) -> None:
        paths[i].write_bytes(realistic_photo(first + i, size=size, seed=seed))

    log.info("writing %d photos of %dx%d to %s", count, size[0], size[1], folder)
    with ThreadPoolExecutor(2) as pool:  # Pillow releases the GIL while it encodes
        list(pool.map(write, range(count)))
    stamp_file.write_text(json.dumps(stamp))
    return paths


def write_model(model: str, work_dir: Path, *, seed: int = 0) -> Path:
    """The generated ``tiny``/``reference`` model in ``work_dir/models`` (written once), or a given directory."""
    if model not in MODEL_KINDS:
        path = Path(model).expanduser().resolve()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a model directory (no config.json)")
        return path
    from engine.tiny_model import write_reference_qwen2_vl, write_tiny_qwen2_vl

    out = work_dir / "models" / f"{model}-qwen2-vl-seed{seed}"
    if not (out / "model.safetensors").is_file():
        log.info("writing the %s random-weight Qwen2-VL to %s", model, out)
        writer = write_tiny_qwen2_vl if model == "tiny" else write_reference_qwen2_vl
        writer(out, seed=seed)
    return out


def prepare_inputs(spec: BenchSpec, work_dir: Path | None = None) -> BenchInputs:
    """Write (or reuse) the model and the photos for ``spec`` in ``work_dir``, else ``spec.work_dir``, else a
    new temporary directory (left in place: it holds the model and the photos)."""
    import tempfile

    work = Path(work_dir or spec.work_dir or tempfile.mkdtemp(prefix="vlbatch-bench-")).resolve()
    model_dir = write_model(spec.model, work, seed=spec.seed)
    n_warm = spec.warmup_items * spec.images_per_prompt
    size = (int(spec.photo_size[0]), int(spec.photo_size[1]))
    warmup = write_photos(work / "warmup", n_warm, size=size, seed=spec.seed, first=1_000_000) if n_warm else []
    photos = write_photos(work / "album", spec.n_photos, size=size, seed=spec.seed)
    return BenchInputs(model_dir=model_dir, warmup=warmup, photos=photos)
