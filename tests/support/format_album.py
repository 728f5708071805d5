"""An album of one file per format a worker reads beyond the ordinary ones, for the thumbnail and dashboard tests.

Real files where the fixtures hold one (tests/preprocessing/fixtures/README.md names their sources and licences):
an iPhone HEIC, AVIFs with an EXIF block and with their own rotation, a Photoshop file. Those no fixture holds are
written by their encoders: a DNG (``benchmarks.dng_sample``, a camera's layout with its embedded preview) and a
JPEG XL (libjxl, through imagecodecs).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from PIL import Image

FIXTURES = Path(__file__).parents[1] / "preprocessing" / "fixtures"
COPIED = ("pillow_heif/iphone-xs.heic", "pillow/exif.avif", "pillow/rot1mir0.avif", "pillow/hopper_merged.psd")


def format_album(folder: Path) -> dict[str, Path]:
    """The album's files, by name, written or copied into ``folder`` (a job's input root)."""
    import imagecodecs
    import numpy as np

    from benchmarks.dng_sample import dng_bytes

    picture = Image.linear_gradient("L").resize((640, 480)).convert("RGB")
    (folder / "camera.dng").write_bytes(dng_bytes(picture))
    (folder / "photo.jxl").write_bytes(bytes(imagecodecs.jpegxl_encode(np.asarray(picture))))
    for name in COPIED:
        shutil.copyfile(FIXTURES / name, folder / Path(name).name)
    names = ["iphone-xs.heic", "camera.dng", "photo.jxl", "exif.avif", "rot1mir0.avif", "hopper_merged.psd"]
    return {name: folder / name for name in names}
