"""Private services for fault tests: a Redis server and a PostgreSQL cluster of their own on free ports,
which a test may kill, restart or flush without touching the shared ones."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def free_port() -> int:
    """A loopback port no one listens on now (the caller binds it next; the one helper for every test server)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float = 30) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def redis_db(base: int, worker: str | None) -> int:
    """The Redis database index of an xdist worker (``gw0``, ``gw1``...): ``base`` for the first, one less for each
    next, so workers never flush or read each other's keys."""
    if not worker or not worker.startswith("gw"):
        return base
    db = base - int(worker[2:])
    if db < 0:
        raise ValueError(f"no Redis database index left for xdist worker {worker} below {base}")
    return db


def worker_redis_url(url: str) -> str:
    """``url`` with the database index of this process (its xdist worker's, or its own when run alone)."""
    head, _, db = url.rpartition("/")
    return f"{head}/{redis_db(int(db or 0), os.environ.get('PYTEST_XDIST_WORKER'))}"


class PrivateRedis:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = shutil.which("redis-server") or "redis-server"
        cmd = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen([*cmd, "--daemonize", "no"], stdout=subprocess.DEVNULL)
        _wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self.proc = None

    def flushall(self) -> None:
        import redis

        redis.Redis.from_url(self.url).flushall()


def cluster_root(prefix: str) -> Path:
    """A new folder for a private PostgreSQL cluster, in a world-traversable place (``/dev/shm`` when the machine has
    it, else ``/tmp``), never under ``TMPDIR`` or pytest's folders: the postgres user (initdb refuses root) cannot
    enter root's 0700 ones, which is what ``scripts/test.sh`` makes TMPDIR."""
    shm = Path("/dev/shm")
    parent = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path("/tmp")
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


class PrivatePostgres:
    """initdb + pg_ctl in ``root``; run as the postgres user when the tests run as root (initdb refuses root)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        cmd = list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=120)

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")

    def _ctl(self, action: str, *extra: str) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "pg.log")
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", log, "-o", opts, "-w", *extra, action)

    def start(self) -> None:
        self._ctl("start")

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")

    def stop(self) -> None:
        self._ctl("stop", "-m", "immediate")
