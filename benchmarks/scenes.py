"""Generated scene photos: a gradient 'landscape' per scene with a few shapes, cheap to make.

The bench harness adds camera-like noise to them (``harness.inputs``); the demo tags them, and its tiny
model was trained on them (``cli.demo``). They live here, below the command line, so both can draw them.
"""

from __future__ import annotations

import random

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
