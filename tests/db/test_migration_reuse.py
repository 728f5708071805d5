"""Revision 0008b adds results.content_hash (indexed) and results.reused_from, and takes them away again."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, inspect

from vlbatch.db.session import MIGRATIONS_DIR


def test_the_reuse_columns_and_index_come_and_go(db_url: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))
    engine = create_engine(db_url)

    def shape() -> tuple[set[str], set[str]]:
        schema = inspect(engine)
        columns = {c["name"] for c in schema.get_columns("results")}
        return columns & {"content_hash", "reused_from"}, {str(i["name"]) for i in schema.get_indexes("results")}

    command.upgrade(cfg, "0008b")
    columns, indexes = shape()
    assert columns == {"content_hash", "reused_from"} and "ix_results_content_hash" in indexes
    command.downgrade(cfg, "0007v")
    columns, indexes = shape()
    assert columns == set() and "ix_results_content_hash" not in indexes
    engine.dispose()
