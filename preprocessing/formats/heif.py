"""HEIC/HEIF through libheif (pillow-heif's Pillow plugin), registered on first use.

The plugin opens the header only (the size is known before a pixel is decoded, for the bomb guard), applies
the file's own rotation and mirror (``irot``/``imir``, which HEIF readers must follow rather than EXIF) and
reports the EXIF orientation as 1, keeping the original in ``info["original_orientation"]``. 10- and 12-bit
images come as 8-bit. AVIF stays with Pillow's own plugin (libavif), which Pillow ships.
"""

from __future__ import annotations

from types import ModuleType

from preprocessing.optional import OptionalModule

__all__ = ["FORMAT", "register"]

FORMAT = "HEIF"  # Pillow's name for the plugin's format


def _register_opener(pillow_heif: ModuleType) -> None:
    # Thumbnails, depth maps and auxiliary images are not read: only the primary image is decoded.
    pillow_heif.register_heif_opener(thumbnails=False, depth_images=False, aux_images=False)


_PILLOW_HEIF = OptionalModule("pillow_heif", setup=_register_opener)


def register() -> bool:
    """Makes Pillow open HEIF files; False when pillow-heif does not import (the file is then refused)."""
    return _PILLOW_HEIF.get() is not None
