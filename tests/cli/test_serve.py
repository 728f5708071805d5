"""``vlbatch migrate``: the cluster's migration Job brings an empty database to the newest schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect
from typer.testing import CliRunner

from vlbatch.settings import get_settings


def test_migrate_creates_the_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.main import app

    url = f"sqlite:///{tmp_path}/fresh.db"
    monkeypatch.setenv("VLBATCH_DATABASE_URL", url)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["migrate"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    engine = create_engine(url)
    assert {"jobs", "chunks", "items", "results", "alembic_version"} <= set(inspect(engine).get_table_names())
    engine.dispose()
