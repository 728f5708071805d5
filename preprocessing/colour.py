"""Colour: an image's embedded ICC profile applied, so what the model sees is sRGB (wide-gamut phone photos
in Display P3, Adobe RGB exports, camera profiles). Runs on the resized image, where it is cheap; an sRGB
profile, or none, costs nothing."""

from __future__ import annotations

import functools
import io
import logging

from PIL import Image, ImageCms

__all__ = ["to_srgb"]

log = logging.getLogger(__name__)

# ICC colour spaces -> the Pillow mode an image in that space has.
_SPACES = {"RGB ": "RGB", "GRAY": "L", "CMYK": "CMYK"}
_SRGB = ImageCms.createProfile("sRGB")


@functools.lru_cache(maxsize=32)
def _transform(icc: bytes, mode: str) -> ImageCms.ImageCmsTransform | None:
    """The transform from ``icc`` to sRGB for ``mode`` images; None when there is nothing to do (the profile
    is sRGB already, is for another colour space, or is not a profile LittleCMS reads)."""
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        space = profile.profile.xcolor_space
        description = ImageCms.getProfileDescription(profile)
        if _SPACES.get(space) != mode or "srgb" in description.lower().replace(" ", ""):
            return None
        return ImageCms.buildTransform(profile, _SRGB, mode, "RGB", renderingIntent=ImageCms.Intent.PERCEPTUAL)
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError) as exc:
        log.debug("ICC profile ignored: %s", exc)
        return None


def to_srgb(img: Image.Image, icc: bytes | None) -> Image.Image:
    """``img`` with the ``icc`` profile it was stored in converted to sRGB ("RGB" mode); ``img`` itself when
    there is no profile to apply."""
    if not icc:
        return img
    transform = _transform(bytes(icc), img.mode)
    if transform is None:
        return img
    return ImageCms.applyTransform(img, transform) or img
