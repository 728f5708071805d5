"""Each tenant's roots (``vlbatch.db.tenants``): set only inside the global roots, read back bounded by them, its
inputs as its outputs unless set, nothing at all for a tenant without roots when roots are required; and the
migration that holds them; on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlbatch.db import tenants
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.errors import VlbatchError
from vlbatch.settings import Settings


def test_roots_lie_inside_the_global_ones_and_default_sensibly(db_url: str, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    for folder in ("a", "a-out", "b"):
        (shared / folder).mkdir(parents=True)
    settings = Settings(database_url=db_url, allowed_input_roots=[shared])
    migrate(db_url)
    with make_sessionmaker(make_engine(db_url))() as s:
        with pytest.raises(VlbatchError) as outside:
            tenants.set_roots(s, settings, tenant="a", inputs=[str(tmp_path)])
        assert outside.value.code == "invalid_tenant_roots"
        with pytest.raises(VlbatchError):
            tenants.set_roots(s, settings, tenant="a", inputs=["relative/folder"])
        tenants.set_roots(s, settings, tenant="a", inputs=[str(shared / "a")], outputs=[str(shared / "a-out")])
        tenants.set_roots(s, settings, tenant="b", inputs=[str(shared / "b")])
        s.commit()
        a, b = tenants.roots_of(s, settings, "a"), tenants.roots_of(s, settings, "b")
        assert (a.inputs, a.outputs, a.own) == ([shared / "a"], [shared / "a-out"], True)
        assert b.outputs == b.inputs == [shared / "b"]
        assert tenants.roots_of(s, settings, "c") == tenants.Roots([shared], [shared])  # the global default
        required = settings.model_copy(update={"tenant_roots_required": True})
        assert tenants.roots_of(s, required, "c") == tenants.Roots([], [], own=True)
        narrowed = settings.model_copy(update={"allowed_input_roots": [shared / "b"]})
        assert tenants.roots_of(s, narrowed, "a").inputs == []  # a root the global ones no longer hold is dropped
        assert tenants.clear_roots(s, tenant="a") and not tenants.clear_roots(s, tenant="a")
        assert [r.tenant for r in tenants.list_roots(s)] == ["b"]


def test_migration_0008f_applies_and_reverts(db_url: str) -> None:
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import inspect

    from vlbatch.db.session import MIGRATIONS_DIR, make_engine, migrate

    migrate(db_url)
    engine = make_engine(db_url)
    assert "tenant_roots" in inspect(engine).get_table_names()
    assert "model" in {c["name"] for c in inspect(engine).get_columns("engine_samples")}
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))
    command.downgrade(cfg, "0007v")
    assert "tenant_roots" not in inspect(engine).get_table_names()
    assert "model" not in {c["name"] for c in inspect(engine).get_columns("engine_samples")}
    command.upgrade(cfg, "heads")
    assert "tenant_roots" in inspect(engine).get_table_names()
    engine.dispose()


def test_object_store_prefixes_lie_inside_the_global_ones_and_default_like_roots(db_url: str, tmp_path: Path) -> None:
    settings = Settings(
        database_url=db_url,
        allowed_input_roots=[tmp_path],
        allowed_s3_prefixes=["s3://shared/tenants", "s3://bucket-b"],
    )
    migrate(db_url)
    with make_sessionmaker(make_engine(db_url))() as s:
        for outside in ("s3://shared/tenants-x", "s3://shared", "s3://bucket-c", "s3://shared/tenants/../x", "/data"):
            with pytest.raises(VlbatchError) as err:
                tenants.set_roots(s, settings, tenant="a", inputs=[], s3_prefixes=[outside])
            assert err.value.code == "invalid_tenant_roots"
        tenants.set_roots(s, settings, tenant="a", inputs=[], s3_prefixes=["s3://shared/tenants/a/"])
        tenants.set_roots(s, settings, tenant="b", inputs=[str(tmp_path)])  # local roots only: the default prefixes
        s.commit()
        assert tenants.roots_of(s, settings, "a").s3_prefixes == ["s3://shared/tenants/a"]
        assert tenants.roots_of(s, settings, "b").s3_prefixes == settings.inputs.allowed_s3_prefixes
        assert tenants.roots_of(s, settings, "c").s3_prefixes == settings.inputs.allowed_s3_prefixes
        required = settings.model_copy(update={"tenant_roots_required": True})
        assert tenants.roots_of(s, required, "b").s3_prefixes == []  # none of its own: none at all
        assert tenants.roots_of(s, required, "c").s3_prefixes == []
        narrowed = settings.model_copy(update={"allowed_s3_prefixes": ["s3://bucket-b"]})
        assert tenants.roots_of(s, narrowed, "a").s3_prefixes == []  # a prefix the global ones no longer hold


def test_migration_0008h_adds_and_drops_the_prefixes_column(db_url: str) -> None:
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import inspect

    from vlbatch.db.session import MIGRATIONS_DIR

    migrate(db_url)
    engine = make_engine(db_url)
    assert "s3_prefixes" in {c["name"] for c in inspect(engine).get_columns("tenant_roots")}
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))
    command.downgrade(cfg, "0008c")
    assert "s3_prefixes" not in {c["name"] for c in inspect(engine).get_columns("tenant_roots")}
    command.upgrade(cfg, "heads")
    assert "s3_prefixes" in {c["name"] for c in inspect(engine).get_columns("tenant_roots")}
    engine.dispose()
