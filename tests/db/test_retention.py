"""``vlbatch.db.retention``'s rule read from the tables, and its migration, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import inspect

from vlbatch.db import batches, retention
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings


def test_a_tenants_own_retention_wins_field_by_field_and_an_own_expiry_wins_over_both(db_url: str) -> None:
    migrate(db_url)
    settings = Settings(database_url=db_url, retention_jobs_s=100, retention_files_s=200)
    with make_sessionmaker(make_engine(db_url))() as s:
        retention.set_retention(s, tenant="a", jobs_s=0, files_s=None)
        s.commit()
        rules = retention.policy(s, settings)
        assert rules.of("a") == retention.Retention(jobs_s=0, files_s=200)  # files: the default
        assert rules.of("b") == retention.Retention(jobs_s=100, files_s=200)
        own = batches.create_file(
            s, tenant="a", filename="f", purpose="batch", size=1, stored_as="x", expires_after_s=3600
        )
        plain = batches.create_file(s, tenant="a", filename="f", purpose="batch", size=1, stored_as="y")
        s.commit()
        assert retention.file_expires_at(own, rules) == own.created_at + timedelta(seconds=3600)
        assert retention.file_expires_at(plain, rules) == plain.created_at + timedelta(seconds=200)
        # nothing is due at once; an hour and a bit later both are, and without retention only the one with its own
        assert retention.count_files(s, rules=rules, now=own.created_at) == (0, 0)
        later = own.created_at + timedelta(seconds=3601)
        assert retention.expired_files(s, rules=rules, now=later, limit=10) == sorted([own.id, plain.id])
        assert retention.expired_files(s, rules=retention.Policy(retention.Retention(0, 0)), now=later, limit=10) == [
            own.id
        ]
        assert retention.clear_retention(s, tenant="a") and not retention.clear_retention(s, tenant="a")


def test_migration_0009c_adds_and_drops_the_retention_columns_and_tables(db_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    from vlbatch.db.session import MIGRATIONS_DIR

    migrate(db_url)
    engine = make_engine(db_url)

    def shape() -> tuple[bool, bool, bool, bool]:
        look = inspect(engine)
        return (
            "expires_at" in {c["name"] for c in look.get_columns("jobs")},
            "expires_at" in {c["name"] for c in look.get_columns("files")},
            "output_expires_after_s" in {c["name"] for c in look.get_columns("batches")},
            {"tenant_retention", "janitor_leases"} <= set(look.get_table_names()),
        )

    assert shape() == (True, True, True, True)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))
    command.downgrade(cfg, "0008h")
    assert shape() == (False, False, False, False)
    command.upgrade(cfg, "heads")
    assert shape() == (True, True, True, True)
    engine.dispose()
