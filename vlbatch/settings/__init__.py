"""The one typed settings object, in sections. Environment variables use the prefix ``VLBATCH_``; ``.env`` is read.

A setting lives in the section of the code that reads it (``settings.database.database_url``,
``settings.thermal.thermal_limit_c``); its environment name is still ``VLBATCH_<FIELD>``, flat, whatever section
holds it, and the field keeps that name, so one search finds the variable, the field and every read.
:data:`FLAT_NAMES` (flat name -> section and field) is the one table of where each setting went: the environment
source, flat construction (``Settings(database_url=...)``, ``model_copy(update={"database_url": ...})``), the
docs page and ``scripts/settings_sections.py`` (the codemod that rewrites flat reads) all read it. Reading a
setting flat (``settings.database_url``) is an AttributeError that names its section.

The sections are in ``service_sections`` (the API's), ``input_sections``, ``worker_sections`` and
``upkeep_sections`` (retention, webhooks); ``section``
holds their common base.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Self

from pydantic import AliasChoices, BaseModel, Field, create_model, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from vlbatch.settings.input_sections import Decoding, Fetch, Inputs, Limits, Uploads, Xmp
from vlbatch.settings.section import Section
from vlbatch.settings.service_sections import (
    Access,
    Broker,
    Client,
    Dashboard,
    Database,
    DryRun,
    Http,
    Logging,
    Quotas,
    TenantQuota,
)
from vlbatch.settings.upkeep_sections import Retention, Webhooks
from vlbatch.settings.worker_sections import (
    Breaker,
    Devices,
    Model,
    QueueKind,
    Runtime,
    Scheduling,
    Telemetry,
    Thermal,
    Worker,
)

__all__ = [
    "FLAT_MEMBERS",
    "FLAT_NAMES",
    "QueueKind",
    "Section",
    "Settings",
    "TenantQuota",
    "env_name_of",
    "env_names",
    "flat_field",
    "get_settings",
    "sections",
]

ENV_PREFIX = "VLBATCH_"
# The environment's unrelated VLBATCH_ variables are ignored (extra="ignore" of the flat twin); a name given to
# Settings(...) that is no setting is refused (extra="forbid" of Settings), so a misspelt test setting fails.
_ENV_CONFIG = SettingsConfigDict(env_prefix=ENV_PREFIX, env_file=".env", env_nested_delimiter="__", extra="ignore")


class Settings(BaseSettings):
    """Every setting, by section. Built flat (``Settings(chunk_size=8)``) or by section; read by section."""

    model_config = SettingsConfigDict(**{**_ENV_CONFIG, "extra": "forbid"})

    database: Database = Field(default_factory=Database)
    broker: Broker = Field(default_factory=Broker)
    logging: Logging = Field(default_factory=Logging)
    client: Client = Field(default_factory=Client)
    access: Access = Field(default_factory=Access)
    http: Http = Field(default_factory=Http)
    dashboard: Dashboard = Field(default_factory=Dashboard)
    quotas: Quotas = Field(default_factory=Quotas)
    dry_run: DryRun = Field(default_factory=DryRun)
    inputs: Inputs = Field(default_factory=Inputs)
    fetch: Fetch = Field(default_factory=Fetch)
    limits: Limits = Field(default_factory=Limits)
    uploads: Uploads = Field(default_factory=Uploads)
    decoding: Decoding = Field(default_factory=Decoding)
    xmp: Xmp = Field(default_factory=Xmp)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    model: Model = Field(default_factory=Model)
    worker: Worker = Field(default_factory=Worker)
    runtime: Runtime = Field(default_factory=Runtime)
    breaker: Breaker = Field(default_factory=Breaker)
    devices: Devices = Field(default_factory=Devices)
    telemetry: Telemetry = Field(default_factory=Telemetry)
    thermal: Thermal = Field(default_factory=Thermal)
    retention: Retention = Field(default_factory=Retention)
    webhooks: Webhooks = Field(default_factory=Webhooks)

    if TYPE_CHECKING:
        # Built flat or by section, checked at run time (an unknown name is refused): the type checker sees
        # keywords, not the sections' fields by their flat names.
        def __init__(self, **values: Any) -> None: ...

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment is read against a flat twin of the sections, so every variable keeps its flat name (and
        # its decoding: JSON objects, NoDecode lists, the vendor aliases); the validator below files the values.
        assert isinstance(env_settings, EnvSettingsSource) and isinstance(dotenv_settings, DotEnvSettingsSource)
        shared: dict[str, Any] = {
            "case_sensitive": env_settings.case_sensitive,
            "env_prefix": env_settings.env_prefix,
            "env_nested_delimiter": env_settings.env_nested_delimiter,
            "env_ignore_empty": env_settings.env_ignore_empty,
            "env_parse_none_str": env_settings.env_parse_none_str,
            "env_parse_enums": env_settings.env_parse_enums,
        }
        env = EnvSettingsSource(_FLAT_MODEL, **shared)
        dotenv = _FlatDotEnv(
            _FLAT_MODEL,
            env_file=dotenv_settings.env_file,
            env_file_encoding=dotenv_settings.env_file_encoding,
            **shared,
        )
        return init_settings, env, dotenv, file_secret_settings

    @model_validator(mode="before")
    @classmethod
    def _file_flat_names(cls, data: Any) -> Any:
        """Flat names (``database_url``, or a vendor alias as ``HCCL_IF_IP``) go into their sections. A flat name
        wins over the same field of a section given whole, and the environment arrives by flat names, so a variable
        also wins over a section passed whole: to override the environment, pass the flat name."""
        if not isinstance(data, Mapping):
            return data
        nested: dict[str, Any] = {}
        flat: dict[str, dict[str, Any]] = {}
        for key, value in data.items():
            name = _ALIASES.get(key, key)
            if name in FLAT_NAMES:
                section, field = FLAT_NAMES[name]
                flat.setdefault(section, {})[field] = value
            else:
                nested[key] = value
        for section, fields in flat.items():
            given = nested.get(section)
            if isinstance(given, BaseModel):
                given = {k: getattr(given, k) for k in given.model_fields_set}
            nested[section] = {**(given or {}), **fields}
        return nested

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied; flat names (``{"chunk_size": 8}``) update their section's field. Like
        pydantic's own ``model_copy`` it does not validate."""
        if not update:
            return super().model_copy(deep=deep)
        whole: dict[str, Any] = {}
        fields: dict[str, dict[str, Any]] = {}
        for key, value in update.items():
            if key in FLAT_NAMES:
                section, field = FLAT_NAMES[key]
                fields.setdefault(section, {})[field] = value
            else:
                whole[key] = value
        for section, changed in fields.items():
            base = whole.get(section, getattr(self, section))
            whole[section] = base.model_copy(update=changed, deep=deep)
        return super().model_copy(update=whole, deep=deep)

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            # Hidden from the type checker, so mypy reports a flat read instead of trusting this fallback.
            section = FLAT_NAMES[name][0] if name in FLAT_NAMES else FLAT_MEMBERS.get(name)
            if section is not None:
                raise AttributeError(
                    f"settings.{name} is settings.{section}.{name}: settings are read by section "
                    "(scripts/settings_sections.py rewrites flat reads)"
                )
            return super().__getattr__(name)


def sections() -> Iterator[tuple[str, type[Section]]]:
    """Each section's attribute name and model, in the order of the class."""
    for name, field in Settings.model_fields.items():
        if not (isinstance(field.annotation, type) and issubclass(field.annotation, Section)):
            msg = f"Settings.{name} is no section: a setting is a field of one (docs/architecture.md, Add a setting)"
            raise TypeError(msg)
        yield name, field.annotation


def _flat_names() -> dict[str, tuple[str, str]]:
    names: dict[str, tuple[str, str]] = {}
    for section, model in sections():
        for field in model.model_fields:
            assert field not in names, f"{field} is in both {names[field][0]} and {section}"
            assert field not in Settings.model_fields, f"{field} is a field and a section"
            names[field] = (section, field)
    return names


def _members() -> dict[str, str]:
    """Each section's own properties and methods (``served_model_name``, ``quota``), read through it too."""
    members: dict[str, str] = {}
    for section, model in sections():
        for name, value in vars(model).items():
            if not name.startswith("_") and (isinstance(value, property) or callable(value)):
                members[name] = section
    return members


FLAT_NAMES: dict[str, tuple[str, str]] = _flat_names()
"""Every setting's flat name (its environment name without ``VLBATCH_``, lower case) -> its section and field."""

FLAT_MEMBERS: dict[str, str] = _members()
"""Derived values a section offers (a property or a method) -> the section."""


def flat_field(name: str) -> FieldInfo:
    """The field a flat name stands for (its type, default, constraints and description)."""
    section, field = FLAT_NAMES[name]
    return _section_model(section).model_fields[field]


def _section_model(section: str) -> type[Section]:
    return dict(sections())[section]


def env_names(name: str) -> tuple[str, ...]:
    """The environment variables that set a flat name: ``VLBATCH_<NAME>``, or a vendor field's alias choices."""
    alias = flat_field(name).validation_alias
    if isinstance(alias, AliasChoices):
        return tuple(str(c) for c in alias.choices)
    return (f"{ENV_PREFIX}{name}".upper(),)


def env_name_of(loc: Sequence[str | int]) -> str:
    """The environment variables behind a validation error's location (``("logging", "log_format")`` ->
    ``VLBATCH_LOG_FORMAT``, a vendor field's every alias, a rule across a section's fields every variable of it), so
    a message names what the user set, not the section it landed in."""
    parts = [str(p) for p in loc]
    section_names = dict(sections())
    if parts and parts[0] in section_names:
        if len(parts) == 1:
            return ", ".join(n for name in section_names[parts[0]].model_fields for n in env_names(name))
        parts = parts[1:]
    if not parts:
        return "settings"
    head = _ALIASES.get(parts[0], parts[0])
    if head not in FLAT_NAMES:
        return f"{ENV_PREFIX}{'__'.join(parts)}".upper()
    names = env_names(head)
    if len(parts) == 1:
        return " / ".join(names)
    return "__".join([names[0], *parts[1:]]).upper()


_ALIASES: dict[str, str] = {alias: name for name in FLAT_NAMES for alias in env_names(name)}


class _FlatEnv(BaseSettings):
    model_config = _ENV_CONFIG


class _FlatDotEnv(DotEnvSettingsSource):
    """A ``.env`` file's settings; its other lines (another program's, a retired setting's) are ignored, as they
    always were, and not refused as names Settings(...) does not know."""

    def __call__(self) -> dict[str, Any]:
        return {key: value for key, value in super().__call__().items() if _ALIASES.get(key, key) in FLAT_NAMES}


# The flat twin the environment is read against: the sections' fields, side by side, under their flat names.
_FLAT_MODEL: type[BaseSettings] = create_model(  # type: ignore[call-overload]
    "FlatSettings", __base__=_FlatEnv, **{name: (flat_field(name).annotation, flat_field(name)) for name in FLAT_NAMES}
)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
