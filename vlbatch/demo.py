"""``vlbatch demo``: a tiny random-weight model, sample photos, and the whole embedded pipeline.

Everything is made here, nothing is downloaded; the model's weights are random, so its tags are
meaningless, but every part (SQL, preprocessing, the real vLLM engine, structured output, parsing,
export) runs exactly as it does with real weights.
"""

from __future__ import annotations

import random
from pathlib import Path

from PIL import Image, ImageDraw

SCENES = ("sunset", "forest", "sea", "snow", "night", "desert")
_PALETTES = {
    "sunset": ((250, 120, 40), (120, 30, 90)),
    "forest": ((30, 110, 40), (90, 60, 20)),
    "sea": ((40, 120, 220), (10, 40, 90)),
    "snow": ((235, 240, 250), (160, 170, 190)),
    "night": ((10, 10, 40), (60, 60, 120)),
    "desert": ((230, 190, 120), (180, 120, 60)),
}


def sample_photo(scene: str, *, seed: int, size: tuple[int, int]) -> Image.Image:
    """A gradient 'landscape' with a few shapes: varied sizes and content, cheap to make."""
    top, bottom = _PALETTES[scene]
    w, h = size
    img = Image.new("RGB", size)
    draw = ImageDraw.Draw(img)
    for y in range(h):
        t = y / max(h - 1, 1)
        draw.line([(0, y), (w, y)], fill=tuple(int(a + (b - a) * t) for a, b in zip(top, bottom, strict=True)))
    rng = random.Random(seed)
    for _ in range(rng.randint(1, 4)):
        x, y, r = rng.randrange(w), rng.randrange(h), rng.randint(4, max(5, min(w, h) // 4))
        draw.ellipse([x - r, y - r, x + r, y + r], fill=tuple(rng.randrange(256) for _ in range(3)))
    return img


def write_sample_photos(folder: Path, *, count: int = 48, broken: int = 2) -> list[Path]:
    """``count`` JPEG/PNG photos of mixed sizes, plus ``broken`` files that are not images (they fail alone)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for i in range(count):
        scene = SCENES[i % len(SCENES)]
        size = (160 + (i % 4) * 120, 120 + (i % 3) * 90)
        path = folder / f"{i:03d}_{scene}.{'png' if i % 5 == 0 else 'jpg'}"
        sample_photo(scene, seed=i, size=size).save(path)
        written.append(path)
    for j in range(broken):
        path = folder / f"broken_{j}.jpg"
        path.write_bytes(b"this is not a JPEG" if j % 2 == 0 else b"")
        written.append(path)
    return written
