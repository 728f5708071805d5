"""A photo's facts from its header, as a result carries them: when it was taken (with the offset from UTC when
the camera wrote one), the camera's make and model, the lens, the size as shown (after the orientation) and
the EXIF orientation; the GPS position too, which the worker keeps only when the job asks for it."""

from __future__ import annotations

import datetime
import re
import struct
from typing import Any

from PIL import ExifTags, Image

__all__ = ["photo_facts"]

_TAG = ExifTags.Base
_GPS = ExifTags.GPS
_EXIF_TIME = re.compile(r"^(\d{4}):(\d{2}):(\d{2})[ T](\d{2}):(\d{2}):(\d{2})")
_OFFSET = re.compile(r"^[+-]\d{2}:\d{2}$")
_MAX_TEXT = 120


def photo_facts(
    exif: Image.Exif, *, size: tuple[int, int], orientation: int, taken_at: str | None = None
) -> dict[str, Any]:
    """The facts of a photo whose header gave ``exif``, ``size`` (upright) and ``orientation``; ``taken_at`` is
    the decoder's own capture time, used when the EXIF has none. Missing facts are None."""
    main = _ifd(exif, ExifTags.IFD.Exif)
    time = _time(main.get(_TAG.DateTimeOriginal) or main.get(_TAG.DateTimeDigitized) or exif.get(_TAG.DateTime))
    offset = _text(main.get(_TAG.OffsetTimeOriginal) or main.get(_TAG.OffsetTime))
    if time and offset and _OFFSET.match(offset):
        time += offset
    lens = _text(main.get(_TAG.LensModel))
    lens_make = _text(main.get(_TAG.LensMake))
    if lens and lens_make and not lens.lower().startswith(lens_make.lower()):
        lens = f"{lens_make} {lens}"
    return {
        "taken_at": time or taken_at,
        "make": _text(exif.get(_TAG.Make)),
        "model": _text(exif.get(_TAG.Model)),
        "lens": lens,
        "width": size[0],
        "height": size[1],
        "orientation": orientation,
        "gps": _gps(_ifd(exif, ExifTags.IFD.GPSInfo)),
    }


def _ifd(exif: Image.Exif, which: int) -> dict[int, Any]:
    try:
        return dict(exif.get_ifd(which))
    except (KeyError, ValueError, SyntaxError, struct.error, EOFError, TypeError):  # a damaged EXIF block
        return {}


def _text(value: object) -> str | None:
    """A printable string of at most _MAX_TEXT characters (EXIF strings come padded with NULs and spaces)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    cleaned = "".join(c for c in value if c.isprintable()).strip()
    return cleaned[:_MAX_TEXT] or None


def _time(value: object) -> str | None:
    """EXIF's "YYYY:MM:DD HH:MM:SS" as ISO 8601; None for a blank or malformed one (cameras write zeros)."""
    text = _text(value)
    match = _EXIF_TIME.match(text or "")
    if match is None or match.group(1) == "0000":
        return None
    try:
        year, month, day, hour, minute, second = (int(part) for part in match.groups())
        return datetime.datetime(year, month, day, hour, minute, second).isoformat()
    except ValueError:  # month 13, second 70: not a time
        return None


def _degrees(value: object, ref: object) -> float | None:
    try:
        d, m, s = (float(v) for v in value)  # type: ignore[attr-defined]
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    sign = -1.0 if _text(ref) in ("S", "W") else 1.0
    return round(sign * (d + m / 60 + s / 3600), 7)


def _gps(gps: dict[int, Any]) -> dict[str, float] | None:
    lat = _degrees(gps.get(_GPS.GPSLatitude), gps.get(_GPS.GPSLatitudeRef))
    lon = _degrees(gps.get(_GPS.GPSLongitude), gps.get(_GPS.GPSLongitudeRef))
    if lat is None or lon is None or not (-90 <= lat <= 90 and -180 <= lon <= 180):
        return None
    out = {"latitude": lat, "longitude": lon}
    try:
        alt = float(gps[_GPS.GPSAltitude])
        out["altitude"] = round(-alt if gps.get(_GPS.GPSAltitudeRef) in (1, b"\x01") else alt, 2)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        pass
    return out
