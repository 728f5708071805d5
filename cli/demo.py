"""``vlbatch demo``: a tiny tagging model, labelled sample photos, and the whole embedded pipeline.

Everything is made here, nothing is downloaded. The photos are generated scenes (sunset, forest, sea,
snow, night, desert; drawn by ``benchmarks.scenes``, which the bench harness shares) and plain shapes in a
few colours, each with the tags and caption it should get; the tiny Qwen2-VL was trained on such scenes
(``train_demo_model``, a few minutes on CPU) and ships in ``cli/assets``, so the demo's tags mean something
and its accuracy line is measured, not assumed.
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from benchmarks.dng_sample import dng_bytes
from benchmarks.scenes import SCENES, sample_photo
from pipelines.image_tagging import SYSTEM_PREFIX, TaggingOptions, user_prompt
from preprocessing.formats import heif
from preprocessing.images import budget_pixels, decode_for_budget

# The last photos of an album, counted from its end, are written as a phone, a camera and a damaged file
# would leave them: an iPhone's HEIC, a camera's DNG (with its JPEG preview), and a JPEG with stray bytes
# before a marker and a cut-short EXIF block, which libjpeg-turbo complains of and every viewer shows.
_SPECIAL_FROM_END = {3: "damaged.jpg", 2: "heic", 1: "dng"}


def write_sample_photos(folder: Path, *, count: int = 48, broken: int = 2) -> list[Path]:
    """``count`` photos of mixed sizes (JPEG and PNG; the last three a HEIC, a DNG and a damaged-but-viewable
    JPEG when there are at least six), plus ``broken`` files that are not images (they fail alone)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for i in range(count):
        scene = SCENES[i % len(SCENES)]
        size = (160 + (i % 4) * 120, 120 + (i % 3) * 90)
        picture = sample_photo(scene, seed=i, size=size)
        special = _SPECIAL_FROM_END.get(count - i) if count >= 6 else None
        if special is None:
            path = folder / f"{i:03d}_{scene}.{'png' if i % 5 == 0 else 'jpg'}"
            picture.save(path)
        else:
            path = folder / f"{i:03d}_{scene}.{special.rsplit('.', 1)[-1]}"
            path.write_bytes(_special_photo(picture, special))
        written.append(path)
    for j in range(broken):
        path = folder / f"broken_{j}.jpg"
        path.write_bytes(b"this is not a JPEG" if j % 2 == 0 else b"")
        written.append(path)
    return written


def _special_photo(picture: Image.Image, kind: str) -> bytes:
    buf = io.BytesIO()
    if kind == "heic":
        heif.register()
        exif = Image.Exif()
        exif[0x010F], exif[0x0110] = "Apple", "iPhone 15"
        picture.save(buf, "HEIF", quality=85, exif=exif.tobytes())
        return buf.getvalue()
    if kind == "dng":
        return dng_bytes(picture, preview_size=picture.size)
    picture.save(buf, "JPEG", quality=90)
    jpeg = buf.getvalue()
    tables = jpeg.index(b"\xff\xdb")
    cut_exif = b"\xff\xe1\x00\x14Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x05\x01\x12"
    return jpeg[:2] + cut_exif + jpeg[2:tables] + b"\x00\x00\x00" + jpeg[tables:]


# What each scene should be tagged with (the scene first) and its caption.
SCENE_ANSWERS: dict[str, tuple[list[str], str]] = {
    "sunset": (["sunset", "sky", "orange"], "an orange sunset sky"),
    "forest": (["forest", "trees", "green"], "a green forest"),
    "sea": (["sea", "water", "blue"], "a blue sea under a clear sky"),
    "snow": (["snow", "winter", "white"], "a white snowy field"),
    "night": (["night", "dark", "sky"], "a dark night sky"),
    "desert": (["desert", "sand", "dunes"], "sand dunes in a desert"),
}
SHAPES = ("circle", "square", "triangle")
COLOURS = {"red": (210, 30, 30), "green": (30, 160, 50), "blue": (30, 60, 210), "yellow": (235, 205, 20)}

# The options the demo tags with, and the model was trained on: the pipeline's own prompt for them.
DEMO_OPTIONS = TaggingOptions(max_tags=5, caption=True, max_caption_chars=60, max_visual_tokens=64)
DEMO_MODEL_DIR = Path(__file__).parent / "assets" / "tiny-tagger-qwen2-vl"
_FACTOR, _MIN_PIXELS = 28, 4 * 28 * 28  # the tiny model's patch 14 x merge 2, and its processor's min_pixels


@dataclass(frozen=True)
class LabelledImage:
    name: str
    image: Image.Image
    label: str  # the scene, or "<colour> <shape>"
    tags: list[str]
    caption: str


def shape_photo(shape: str, colour: str, *, seed: int, size: tuple[int, int]) -> Image.Image:
    """One large shape of a named colour on a light, slightly tinted background."""
    rng = random.Random(seed)
    w, h = size
    img = Image.new("RGB", size, tuple(rng.randint(215, 250) for _ in range(3)))
    draw = ImageDraw.Draw(img)
    r = rng.randint(min(w, h) // 4, min(w, h) * 2 // 5)
    cx, cy = rng.randint(r, w - r), rng.randint(r, h - r)
    fill = tuple(max(0, min(255, c + rng.randint(-20, 20))) for c in COLOURS[colour])
    if shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif shape == "square":
        draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=fill)
    else:
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
    return img


def labelled_set(count: int, *, seed: int, shapes: bool = True) -> list[LabelledImage]:
    """``count`` generated images with their expected answers; different seeds give disjoint pictures."""
    rng = random.Random(seed)
    kinds: list[tuple[str, str | None]] = [(s, None) for s in SCENES]
    if shapes:
        kinds += [(shape, colour) for shape in SHAPES for colour in COLOURS]
    out = []
    for i in range(count):
        first, colour = kinds[i % len(kinds)]
        size = (rng.randint(120, 560), rng.randint(100, 400))
        pic_seed = seed * 100_003 + i
        if colour is None:
            tags, caption = SCENE_ANSWERS[first]
            out.append(
                LabelledImage(f"{i:04d}_{first}", sample_photo(first, seed=pic_seed, size=size), first, tags, caption)
            )
        else:
            image = shape_photo(first, colour, seed=pic_seed, size=size)
            label = f"{colour} {first}"
            out.append(LabelledImage(f"{i:04d}_{colour}_{first}", image, label, [colour, first], f"a {label}"))
    return out


def model_ready(image: Image.Image, *, max_visual_tokens: int) -> Image.Image:
    """The image as the worker hands it to the engine: JPEG bytes decoded and sized for the budget."""
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    max_px = budget_pixels(max_visual_tokens, patch_size=14, merge_size=2)
    return decode_for_budget(buf.getvalue(), factor=_FACTOR, min_pixels=min(_MIN_PIXELS, max_px), max_pixels=max_px)


def expected_answer(item: LabelledImage, opts: TaggingOptions) -> dict[str, Any]:
    answer: dict[str, Any] = {"tags": item.tags[: opts.max_tags]}
    if opts.caption:
        answer["caption"] = item.caption[: opts.max_caption_chars]
    return answer


def scene_of(tags: Iterable[str]) -> str | None:
    """The one scene tag among ``tags``; None when there is none or more than one."""
    found = {t for t in tags if t in SCENES}
    return found.pop() if len(found) == 1 else None


def scene_accuracy(rows: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """(correct, scored) over result rows whose file name carries a scene (``NNN_<scene>.jpg``)."""
    correct = scored = 0
    for row in rows:
        stem = Path(str(row.get("ref") or "")).stem
        label = stem.split("_", 1)[-1]
        if label not in SCENES:
            continue
        scored += 1
        correct += row.get("status") == "succeeded" and scene_of(row.get("tags") or []) == label
    return correct, scored


def train_demo_model(out_dir: Path, *, count: int = 900, steps: int = 500, seed: int = 0) -> Any:
    """Train the tiny tagger on ``count`` generated images with the demo's prompt; returns the report."""
    from engine.training import Example, train_tiny_vl
    from engine.training.tagger import answer_json

    opts = DEMO_OPTIONS
    prompt = user_prompt(opts, 1)
    items = labelled_set(count, seed=seed + 1)
    examples = [
        Example(
            model_ready(it.image, max_visual_tokens=opts.max_visual_tokens),
            SYSTEM_PREFIX,
            prompt,
            answer_json(expected_answer(it, opts)),
        )
        for it in items
    ]
    corpus = (SYSTEM_PREFIX, prompt, *sorted({e.answer for e in examples}), *json.dumps(SCENE_ANSWERS).split())
    return train_tiny_vl(out_dir, examples, steps=steps, seed=seed, corpus=corpus, log=print)


def write_labelled_folder(folder: Path, *, count: int, seed: int, shapes: bool = True) -> Path:
    """``count`` generated JPEGs and a ``labels.jsonl`` (tags, label) for ``vlbatch eval``; returns the labels file."""
    from cli.evaluation.labels import Expected, write_labels

    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for item in labelled_set(count, seed=seed, shapes=shapes):
        path = folder / f"{item.name}.jpg"
        item.image.save(path, quality=90)
        records.append(Expected(path.resolve(), tags=frozenset(item.tags), label=item.label))
    labels = folder / "labels.jsonl"
    write_labels(labels, records)
    return labels


def vlbatch_command() -> str:
    """How to run ``vlbatch`` from the shell the demo was started in: its name when that is on PATH, else the
    launcher beside this interpreter (``scripts/demo.sh`` runs ``.venv/bin/vlbatch``, which no PATH names)."""
    import shutil
    import sys

    beside = Path(sys.executable).parent / "vlbatch"
    on_path = shutil.which("vlbatch")
    if on_path is not None and (not beside.exists() or Path(on_path).resolve() == beside.resolve()):
        return "vlbatch"
    return str(beside) if beside.exists() else "uv run vlbatch"
