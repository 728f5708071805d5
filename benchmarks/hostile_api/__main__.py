"""``python -m benchmarks.hostile_api [module ...]``: run every area's probes and print one table."""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from benchmarks.harness.children import api_process, child_env
from benchmarks.hostile_api import Row, Target

AREAS = ("bodies", "dashboard", "tenancy", "dry_runs", "deadlines", "objects", "decoders", "limits")


def _keys(database_url: str) -> tuple[str, dict[str, str]]:
    from vlbatch.db.keys import create_key
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    migrate(database_url)
    engine = make_engine(database_url)
    with make_sessionmaker(engine)() as session:
        admin = create_key(session, tenant="admin", is_admin=True).secret
        tenants = {name: create_key(session, tenant=name).secret for name in ("a", "b")}
        session.commit()
    engine.dispose()
    return admin, tenants


@contextmanager
def api_for(area: ModuleType, folder: Path) -> Iterator[Target]:
    """A ``vlbatch api`` process with the area's settings, on a loopback port; its log is ``api.log``."""
    root, data_dir = folder / "inputs", folder / "data"
    root.mkdir()
    data_dir.mkdir()
    database_url = f"sqlite:///{folder / 'vlbatch.db'}"
    admin, tenants = _keys(database_url)
    env = child_env(
        {
            "VLBATCH_DATABASE_URL": database_url,
            "VLBATCH_BROKER_URL": "redis://127.0.0.1:6379/12",
            "VLBATCH_ALLOWED_INPUT_ROOTS": str(root),
            "VLBATCH_DATA_DIR": str(data_dir),
            "VLBATCH_AUTH": "on",
        }
        | getattr(area, "ENV", {})
    )
    with api_process(env, folder / "api.log") as api:
        yield Target(api.base, api.pid, root, data_dir, admin, tenants)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("areas", nargs="*", help=f"some of {', '.join(AREAS)} (default: every area)")
    args = parser.parse_args()
    if unknown := set(args.areas) - set(AREAS):
        parser.error(f"unknown areas {sorted(unknown)}; choose from {', '.join(AREAS)}")
    rows: list[Row] = []
    for name in args.areas or AREAS:
        area = importlib.import_module(f"benchmarks.hostile_api.{name}")
        with tempfile.TemporaryDirectory() as tmp, api_for(area, Path(tmp)) as target:
            rows.extend(area.probes(target))
    print("| probe | sent | got | verdict |\n| --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row.defect} | {row.sent} | {row.got} | {row.verdict} |")
    sys.exit(0 if all(row.ok for row in rows) else 1)


if __name__ == "__main__":
    main()
