"""What every section of the settings shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """One group of settings, a field of :class:`vlbatch.settings.Settings`.

    A field keeps the name of its environment variable (``VLBATCH_<FIELD>``) whatever section holds it, so the
    variable, the field and every read of it are found by one search. A field with a ``validation_alias`` (the
    vendor variables) is set by its name too: the settings hand every value over by name.
    """

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)


def split_commas(value: object) -> object:
    """A comma separated environment value as its list; any other value as it is."""
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    return value
