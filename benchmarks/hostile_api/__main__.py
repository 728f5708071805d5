"""``python -m benchmarks.hostile_api [module ...]``: run every area's probes and print one table."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import httpx

from benchmarks.hostile_api import Row, Target

AREAS = ("bodies", "dashboard", "tenancy")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLBATCH_")}
    env.update(
        VLBATCH_DATABASE_URL=database_url,
        VLBATCH_BROKER_URL="redis://127.0.0.1:6379/12",
        VLBATCH_ALLOWED_INPUT_ROOTS=str(root),
        VLBATCH_DATA_DIR=str(data_dir),
        VLBATCH_AUTH="on",
    )
    env.update(getattr(area, "ENV", {}))
    log = (folder / "api.log").open("w")
    exe = Path(sys.executable).with_name("vlbatch")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "cli.main"]
    proc = subprocess.Popen([*cmd, "api", "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vlbatch api exited: {(folder / 'api.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("vlbatch api did not answer /healthz within 60 s")
            time.sleep(0.1)
        yield Target(base, proc.pid, root, data_dir, admin, tenants)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


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
