"""docs/getting-started.md works as written: its marked commands, read from the page, run in order.

Every code block after a ``<!-- run -->`` marker is a step; ``<!-- run: api -->`` and ``<!-- run: worker -->`` start
the services in the background (as the page's ``&`` does). They run against a PostgreSQL cluster and a Redis of the
test's own (``tests/support/rig.py::private_services``), so the page's addresses are swapped for theirs, and nothing
else of the page is changed:

* ``127.0.0.1:6379`` and ``127.0.0.1/vlbatch`` name the private Redis and PostgreSQL (their ports), ``8000`` a free
  port for the API, ``cli/assets/tiny-tagger-qwen2-vl`` the run's tiny model (the shared engine's model directory);
* ``sudo -u postgres`` reaches the private cluster as its superuser (a stand-in ``sudo`` on PATH drops ``-u postgres``;
  ``PGHOST``, ``PGPORT`` and ``PGUSER`` name the cluster).

Each command runs in bash with the variables the commands before it set (``export``, and ``JOB=$(...)``: ``set -a``),
from a folder holding what the demo leaves (``vlbatch-demo/photos``: sample photos, two of them broken). The API is a
real ``vlbatch api`` process. The worker is the page's ``vlbatch worker`` command run in this process on a thread,
with the run's shared engine lent (``worker.lent_engine.lent_for``): the suite's engine-load budget has no room for a
worker process of its own, and the rig's worker serves a database and an API that are not the page's. Then the job's
results, its exports and its sidecars are checked.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from engine.runtime.runner import EngineRunner
from tests.support.engine import child_env
from tests.support.rig import private_services
from tests.support.services import PG_BIN, free_port

pytestmark = [pytest.mark.engine("shared"), pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"
STEP = re.compile(r"^<!-- run(?::\s*(\w+))? -->\n```bash\n(.*?)^```", re.M | re.S)
PHOTOS = 12  # sample photos, and the two broken files beside them
SUDO = """#!/bin/sh
# The machine's `sudo -u postgres`, in the test: the private cluster's superuser is named by PGUSER, PGHOST, PGPORT.
[ "$1" = "-u" ] && shift 2
exec "$@"
"""


@dataclass
class Step:
    kind: str  # run, api, worker
    commands: list[str]


def page_steps(text: str) -> list[Step]:
    """The marked blocks of ``text`` in order, each a list of commands (a trailing backslash joins lines)."""
    steps = []
    for match in STEP.finditer(text):
        lines = re.sub(r"\s*\\\n\s*", " ", match.group(2)).splitlines()
        steps.append(Step(match.group(1) or "run", [line.strip() for line in lines if line.strip()]))
    return steps


def test_the_page_marks_its_steps_in_order() -> None:
    steps = page_steps(PAGE.read_text(encoding="utf-8"))
    kinds = [s.kind for s in steps]
    assert kinds.count("api") == 1 and kinds.count("worker") == 1, kinds
    assert kinds.index("api") < kinds.index("worker") < len(kinds) - 1
    commands = [c for s in steps for c in s.commands]
    for needed in ("psql", "vlbatch keys create", "vlbatch jobs submit", "curl", "vlbatch jobs watch", "vlbatch xmp"):
        assert any(needed in c for c in commands), f"the page runs no {needed}"
    first = next(i for i, c in enumerate(commands) if "vlbatch keys create" in c)
    assert any("psql" in c for c in commands[:first]), "the database step comes before the key"
    assert page_steps("<!-- run -->\n```bash\na \\\n  b\nc\n```\n\n```bash\nskipped\n```\n") == [
        Step("run", ["a b", "c"])
    ]


def _bare(command: str) -> str:
    """A command without its trailing comment, its words joined by single spaces."""
    return " ".join(re.sub(r"\s+#.*$", "", command).split())


def test_the_readmes_five_minute_path_is_the_pages() -> None:
    """The README's short path runs nothing the page does not: each of its commands is one the page runs (or the
    page's unmarked `source .venv/bin/activate`)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Five minutes", 1)[1]
    block = re.search(r"```bash\n(.*?)^```", section, re.M | re.S)
    assert block is not None
    ran = {_bare(c) for s in page_steps(PAGE.read_text(encoding="utf-8")) for c in s.commands}
    ran.add("source .venv/bin/activate")
    lines = [_bare(line) for line in re.sub(r"\s*\\\n\s*", " ", block.group(1)).splitlines() if line.strip()]
    assert len(lines) >= 8 and [line for line in lines if line not in ran] == []


class Shell:
    """Runs commands one by one in bash, carrying the environment each leaves to the next."""

    def __init__(self, cwd: Path, env: dict[str, str], swaps: dict[str, str]) -> None:
        self.cwd, self.env, self.swaps = cwd, env, swaps
        self.out: dict[str, subprocess.CompletedProcess[str]] = {}

    def swap(self, command: str) -> str:
        for old, new in self.swaps.items():
            command = command.replace(old, new)
        return command

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        dump = self.cwd / ".env-after"
        script = f"set -aeo pipefail\n{self.swap(command)}\nenv -0 > {shlex.quote(str(dump))}\n"
        proc = subprocess.run(
            ["bash", "-c", script], cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, f"{command}\nexit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        self.env = dict(kv.split("=", 1) for kv in dump.read_text().split("\0") if "=" in kv)
        self.out[command] = proc
        return proc

    def output(self, needle: str) -> subprocess.CompletedProcess[str]:
        return next(p for c, p in self.out.items() if needle in c)


def _background(command: str) -> str:
    command = command.strip()
    assert command.endswith("&"), f"a service step runs in the background: {command}"
    return command[:-1].strip()


def _wait_http(url: str, log: Path, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(0.3)


class InProcessWorker:
    """The page's ``vlbatch worker`` command on a thread of this process (where the shared engine is lent)."""

    def __init__(self, command: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
        words = shlex.split(_background(command))
        assignments = [w for w in words[: words.index("vlbatch")] if "=" in w]
        assert words[words.index("vlbatch") :] == ["vlbatch", "worker"], command
        settings = {k: v for k, v in env.items() if k.startswith("VLBATCH_")}
        settings |= dict(a.split("=", 1) for a in assignments)
        for key in [k for k in os.environ if k.startswith("VLBATCH_") and k != "VLBATCH_ENGINE_LOAD_LEDGER"]:
            monkeypatch.delenv(key)
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
        self.settings = settings
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="getting-started-worker", daemon=True)

    def _run(self) -> None:
        from celery.exceptions import SecurityWarning

        from cli.main import app
        from vlbatch.settings import get_settings

        get_settings.cache_clear()
        try:
            with warnings.catch_warnings():
                # Celery warns a worker run as root (CI's user); in a process of its own that is a line on stderr,
                # here the suite's warnings-as-errors would end the worker on it.
                warnings.simplefilter("ignore", SecurityWarning)
                app(["worker"], standalone_mode=False)
        except SystemExit as exc:  # Celery's worker ends on sys.exit, 0 after a shutdown
            if exc.code not in (0, None):
                self.error = exc
        except BaseException as exc:  # reported by the test, not lost on the thread
            self.error = exc

    def start(self, timeout: float = 300) -> None:
        """Start it and wait until Celery says it is ready (after its engine's canary), or fail with why it ended."""
        from celery import signals

        ready = threading.Event()

        def _ready(**_: object) -> None:
            ready.set()

        signals.worker_ready.connect(_ready, weak=False)
        try:
            self.thread.start()
            deadline = time.monotonic() + timeout
            while not ready.wait(0.5):
                assert self.thread.is_alive(), f"the worker ended: {self.error!r}"
                assert time.monotonic() < deadline, "the worker was not ready in time"
        finally:
            signals.worker_ready.disconnect(_ready)

    def stop(self) -> None:
        """Celery's own remote shutdown (the broker's control channel): the worker drains and returns."""
        from celery import Celery

        control = Celery(broker=self.settings["VLBATCH_BROKER_URL"])
        try:
            control.control.shutdown()
        finally:
            control.close()
        self.thread.join(120)
        assert not self.thread.is_alive(), "the worker did not stop after Celery's shutdown"
        from vlbatch.settings import get_settings

        get_settings.cache_clear()


@pytest.fixture
def demo_folder(tmp_path: Path) -> Path:
    """What the demo leaves: sample photos and two broken files in vlbatch-demo/photos."""
    from cli.demo import write_sample_photos

    write_sample_photos(tmp_path / "vlbatch-demo" / "photos", count=PHOTOS)
    return tmp_path


@pytest.fixture
def api_process() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_getting_started_runs_as_written(
    demo_folder: Path,
    shared_engine: EngineRunner,
    api_process: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps = page_steps(PAGE.read_text(encoding="utf-8"))
    bin_dir = demo_folder / "bin"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text(SUDO)
    (bin_dir / "sudo").chmod(0o755)
    port = free_port()
    with private_services() as (redis, pg):
        swaps = {
            "127.0.0.1:6379/0": f"127.0.0.1:{redis.port}/0",
            "127.0.0.1/vlbatch": f"127.0.0.1:{pg.port}/vlbatch",
            "127.0.0.1:8000": f"127.0.0.1:{port}",
            "--port 8000": f"--port {port}",
            "cli/assets/tiny-tagger-qwen2-vl": str(shared_engine.config.model),
        }
        path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), str(PG_BIN), os.environ["PATH"]])
        env = child_env(PATH=path, PGHOST="127.0.0.1", PGPORT=str(pg.port), PGUSER="postgres")
        shell = Shell(demo_folder, env, swaps)
        worker: InProcessWorker | None = None
        try:
            for step in steps:
                if step.kind == "run":
                    for command in step.commands:
                        shell.run(command)
                elif step.kind == "api":
                    (command,) = step.commands
                    log = demo_folder / "api.log"
                    argv = ["bash", "-c", "exec " + shell.swap(_background(command))]
                    proc = subprocess.Popen(argv, cwd=demo_folder, env=shell.env, stdout=log.open("wb"), stderr=-2)
                    api_process.append(proc)
                    _wait_http(f"http://127.0.0.1:{port}/healthz", log, proc)
                else:
                    (command,) = step.commands
                    worker = InProcessWorker(shell.swap(command), shell.env, monkeypatch)
                    worker.start()
            _check_outcome(shell, demo_folder, port)
        finally:
            if worker is not None:
                worker.stop()
                assert worker.error is None, repr(worker.error)


def _check_outcome(shell: Shell, folder: Path, port: int) -> None:
    key = shell.env["VLBATCH_API_KEY"]
    assert key.startswith("vlb_"), "vlbatch keys create printed the key alone on stdout"
    job_id = shell.env["JOB"]
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as api:
        job = api.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] == "finished" and job["total"] == PHOTOS + 2, job
        assert job["counts"].get("succeeded") == PHOTOS and job["counts"].get("failed") == 2, job
        failed = api.get(f"/v1/jobs/{job_id}/items", params={"status": "failed"}).json()["data"]
        assert sorted(i["error_code"] for i in failed) == ["decode_error", "empty_file"], failed
        # The curl job over the same folder: made, and it runs too (waited for, so the worker stops idle).
        second = json.loads(shell.output("curl -sf -X POST").stdout)
        assert second["total"] == PHOTOS + 2 and second["id"] != job_id, second
        deadline = time.monotonic() + 300
        while api.get(f"/v1/jobs/{second['id']}").json()["status"] != "finished":
            assert time.monotonic() < deadline, "the curl job did not finish"
            time.sleep(0.5)

    assert f"{job_id}: finished" in shell.output("vlbatch jobs watch").stdout
    assert job_id in shell.output("vlbatch jobs list").stdout
    assert len(json.loads(shell.output("items?status=failed").stdout)["data"]) == 2

    lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    assert len(lines) == PHOTOS + 2
    ok = [r for r in lines if r["status"] == "succeeded"]
    assert len(ok) == PHOTOS and all(isinstance(r["tags"], list) for r in ok)
    with (folder / "results.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == PHOTOS + 2 and {r["item_id"] for r in rows} == {str(r["item_id"]) for r in lines}

    sidecars = sorted((folder / "xmp").rglob("*.xmp"))
    assert len(sidecars) == PHOTOS, sidecars
    for result in ok:
        tags = [t["tag"] if isinstance(t, dict) else t for t in result["tags"]]
        sidecar = folder / "xmp" / (Path(result["ref"]).name + ".xmp")
        text = sidecar.read_text(encoding="utf-8")
        assert "dc:subject" in text and all(tag in text for tag in tags if "<" not in tag and "&" not in tag)
