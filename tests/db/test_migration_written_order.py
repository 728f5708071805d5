"""Revision 0007v gives items finished before it a write position (their seq) and their jobs the next one."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from vlbatch.db.session import MIGRATIONS_DIR, migrate


def test_items_finished_before_the_revision_keep_their_seq_as_position(db_url: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))
    command.upgrade(cfg, "0007u")
    engine = create_engine(db_url)
    statuses = ["succeeded", "queued", "failed", "running", "cancelled", "succeeded"]
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (id, tenant, pipeline, model, priority, status, options, options_hash, total, "
                "created_at, energy_unmetered_tokens) VALUES ('j1', 'default', 'image_tagging', 'm', 'batch', "
                "'running', '{}', 'h', 6, CURRENT_TIMESTAMP, 0), ('j2', 'default', 'image_tagging', 'm', 'batch', "
                "'queued', '{}', 'h', 0, CURRENT_TIMESTAMP, 0)"
            )
        )
        conn.execute(text("INSERT INTO chunks (job_id, seq, done, sends) VALUES ('j1', 0, false, 0)"))
        chunk_id = conn.execute(text("SELECT id FROM chunks WHERE job_id = 'j1'")).scalar_one()
        for seq, status in enumerate(statuses):
            conn.execute(
                text(
                    "INSERT INTO items (job_id, chunk_id, seq, inputs, status, attempts, crash_count, updated_at) "
                    "VALUES ('j1', :c, :s, '{}', :st, 0, 0, CURRENT_TIMESTAMP)"
                ),
                {"c": chunk_id, "s": seq, "st": status},
            )
    migrate(db_url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT status, written_seq FROM items ORDER BY seq")).all()
        counters = dict(conn.execute(text("SELECT id, results_written FROM jobs")).all())
    engine.dispose()
    assert [w for _, w in rows] == [0, None, 2, None, None, 5]
    assert counters == {"j1": 6, "j2": 0}
