"""Issue 35 and 40: a command prints its own output and nothing of other libraries' logs (those go to its log file,
named at the end), ``-v`` brings them back, and the mistakes a new user makes end in one line with a code and a
non-zero exit, no traceback: the real console script in a subprocess, no engine load."""

from __future__ import annotations

import getpass
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from cli.demo import DEMO_MODEL_DIR, write_sample_photos
from tests.support.engine import child_env
from tests.support.services import free_port
from vlbatch.logs import JsonFormatter, LineFormatter


def _vlbatch(cwd: Path, *args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=cwd,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_error_line(proc: subprocess.CompletedProcess[str], code: str) -> str:
    """The run failed with exit 1 and ended in ``error <code>: ...``, no traceback; a command (not a service, whose
    log is its stderr) says at most its log file's name before it."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    assert lines[-1].startswith(f"error {code}: "), proc.stderr
    assert sum(ln.startswith("error ") or " ERROR " in ln for ln in lines) == 1, proc.stderr  # said once
    if proc.args[3] not in ("api", "worker"):
        assert all(ln.startswith("log: ") for ln in lines[:-1]), proc.stderr
    return lines[-1]


@pytest.fixture(scope="module")
def album(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("album") / "photos"
    write_sample_photos(folder, count=6)  # a damaged JPEG among them: PIL warns, and the warning is a log line
    return folder


def test_a_dry_run_prints_its_answer_and_nothing_before_it(tmp_path: Path, album: Path) -> None:
    db = f"sqlite:///{tmp_path / 'quiet.db'}"
    proc = _vlbatch(tmp_path, "tag", str(album), "--model", str(DEMO_MODEL_DIR), "--dry-run", VLBATCH_DATABASE_URL=db)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "dry run: 8 items, nothing stored", proc.stdout
    assert proc.stderr.splitlines() == ["log: vlbatch-tag.log"], proc.stderr  # the log file named, nothing else
    logged = (tmp_path / "vlbatch-tag.log").read_text()
    assert logged.startswith("--- vlbatch tag ") and "py.warnings" in logged and "Corrupt EXIF" in logged
    assert "alembic" not in logged  # migrations run silently unless they fail


def test_verbose_brings_the_logs_back_to_the_terminal(tmp_path: Path, album: Path) -> None:
    db = f"sqlite:///{tmp_path / 'verbose.db'}"
    args = ("tag", str(album), "--model", str(DEMO_MODEL_DIR), "--dry-run")
    proc = _vlbatch(tmp_path, *args, "-v", VLBATCH_DATABASE_URL=db)
    assert proc.returncode == 0, proc.stderr
    assert "INFO alembic.runtime.migration Running upgrade" in proc.stderr
    assert "WARNING py.warnings" in proc.stderr and "Corrupt EXIF" in proc.stderr
    assert proc.stdout.splitlines()[0].startswith("dry run: ")
    assert not (tmp_path / "vlbatch-tag.log").exists()
    level = _vlbatch(
        tmp_path, "keys", "list", VLBATCH_DATABASE_URL=f"sqlite:///{tmp_path / 'l.db'}", **{"VLBATCH_LOG_LEVEL": "info"}
    )
    assert level.returncode == 0 and "alembic.runtime.migration" in level.stderr, level.stderr


def test_a_command_that_logs_nothing_leaves_no_log_file(tmp_path: Path) -> None:
    proc = _vlbatch(tmp_path, "keys", "list", VLBATCH_DATABASE_URL=f"sqlite:///{tmp_path / 'k.db'}")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert list(tmp_path.glob("*.log")) == []


def test_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://vlbatch@127.0.0.1:{free_port()}/vlbatch"
    line = _one_error_line(_vlbatch(tmp_path, "keys", "list", VLBATCH_DATABASE_URL=url), "database_unavailable")
    assert f"cannot reach the database at {url} (connection refused)" in line and "VLBATCH_DATABASE_URL" in line
    gone = f"sqlite:///{tmp_path / 'no' / 'such' / 'folder.db'}"
    line = _one_error_line(_vlbatch(tmp_path, "keys", "list", VLBATCH_DATABASE_URL=gone), "database_unavailable")
    assert "its folder does not exist" in line
    # The same for the API's start: before the server, not in its start-up's traceback.
    api = _vlbatch(tmp_path, "api", "--port", str(free_port()), VLBATCH_DATABASE_URL=url)
    assert f"cannot reach the database at {url}" in _one_error_line(api, "database_unavailable")


def test_a_missing_postgres_role_or_database_says_the_command_that_creates_it(tmp_path: Path, pg_url: str) -> None:
    server = make_url(pg_url)
    no_role = server.set(username="vlb_no_such_role", database="vlb_no_such_role")
    line = _one_error_line(
        _vlbatch(tmp_path, "keys", "create", "--tenant", "t", VLBATCH_DATABASE_URL=no_role.render_as_string()),
        "database_login_refused",
    )
    assert 'no role "vlb_no_such_role"' in line
    assert "createuser vlb_no_such_role && sudo -u postgres createdb -O vlb_no_such_role vlb_no_such_role" in line
    no_db = server.set(database="vlb_no_such_database")
    line = _one_error_line(
        _vlbatch(tmp_path, "worker", VLBATCH_DATABASE_URL=no_db.render_as_string()), "database_login_refused"
    )
    owner = server.username or getpass.getuser()
    assert 'no database "vlb_no_such_database"' in line and f"createdb -O {owner} vlb_no_such_database" in line


def test_a_wrong_broker_url_ends_the_worker_before_its_engine_loads(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'w.db'}"
    refused = f"redis://127.0.0.1:{free_port()}/0"
    proc = _vlbatch(tmp_path, "worker", VLBATCH_DATABASE_URL=db, VLBATCH_BROKER_URL=refused, VLBATCH_MODEL_PATH="/nope")
    line = _one_error_line(proc, "broker_unavailable")
    assert f"cannot reach the broker at {refused}" in line and "VLBATCH_BROKER_URL" in line
    proc = _vlbatch(tmp_path, "worker", VLBATCH_DATABASE_URL=db, VLBATCH_BROKER_URL="http://127.0.0.1:6379/0")
    assert "is not a broker URL" in _one_error_line(proc, "broker_unavailable")


def test_a_folder_that_is_not_a_model_is_one_line(tmp_path: Path, album: Path) -> None:
    (tmp_path / "downloads").mkdir()
    proc = _vlbatch(
        tmp_path, "tag", str(album), "--model", "downloads", VLBATCH_DATABASE_URL=f"sqlite:///{tmp_path / 'm.db'}"
    )
    assert "config.json" in _one_error_line(proc, "model_config_invalid")


def test_a_bad_setting_and_a_typo_in_an_option_are_one_line_each(tmp_path: Path) -> None:
    bad = _vlbatch(tmp_path, "keys", "list", VLBATCH_LOG_FORMAT="yaml")
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error invalid_settings: VLBATCH_LOG_FORMAT:")
    typo = _vlbatch(tmp_path, "tag", ".", "--max-tag", "3")
    assert typo.returncode == 2 and "--max-tags" in typo.stderr and "Traceback" not in typo.stderr


def test_keys_create_says_which_database_holds_the_key_and_a_401_says_where_keys_live(tmp_path: Path) -> None:
    made = _vlbatch(tmp_path, "keys", "create", "--tenant", "acme")
    assert made.returncode == 0, made.stderr
    assert "stored in sqlite:///./vlbatch.db (VLBATCH_DATABASE_URL is unset)" in made.stderr
    assert (tmp_path / "vlbatch.db").is_file()
    other = f"sqlite:///{tmp_path / 'api.db'}"
    port = free_port()
    env = child_env(VLBATCH_DATABASE_URL=other)
    api = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "api", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        body = _get_when_up(f"http://127.0.0.1:{port}/v1/jobs", made.stdout.strip())
        assert body["code"] == "unauthorized" and "vlbatch keys create" in body["detail"]
        assert "VLBATCH_DATABASE_URL" in body["detail"] and "./vlbatch.db when unset" in body["detail"]
        listed = _vlbatch(tmp_path, "jobs", "list", VLBATCH_API_URL=f"http://127.0.0.1:{port}")
        assert "set VLBATCH_API_KEY" in _one_error_line(listed, "remote_error")
    finally:
        api.terminate()
        _, err = api.communicate(timeout=30)
    lines = err.splitlines()
    assert lines and all(len(ln) <= 1200 for ln in lines), err
    assert any("INFO vlbatch.serve database" in ln for ln in lines), err


def _get_when_up(url: str, key: str) -> dict[str, str]:
    for _ in range(300):
        try:
            resp = httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=5)
        except httpx.TransportError:
            time.sleep(0.2)
            continue
        assert resp.status_code == 401, resp.text
        body: dict[str, str] = resp.json()
        return body
    raise AssertionError(f"{url} never answered")


def test_service_logs_are_one_json_object_per_line_when_asked(tmp_path: Path) -> None:
    port = free_port()
    env = child_env(VLBATCH_DATABASE_URL=f"sqlite:///{tmp_path / 'j.db'}", VLBATCH_LOG_FORMAT="json")
    api = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "api", "--port", str(port)], cwd=tmp_path, env=env, stderr=subprocess.PIPE
    )
    try:
        _get_when_up(f"http://127.0.0.1:{port}/v1/jobs", "vlb_not_a_key")
    finally:
        api.terminate()
        _, err = api.communicate(timeout=30)
    records = [json.loads(line) for line in err.decode().splitlines()]
    assert {"time", "level", "logger", "message", "process"} <= set(records[0])
    assert any(r["logger"] == "uvicorn.access" and "401" in r["message"] for r in records), records


def _record(message: str, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("bad\nvalue")
        except ValueError:
            info = sys.exc_info()
    return logging.LogRecord("vllm.config", logging.INFO, __file__, 1, message, None, info)


def test_a_service_line_is_one_line_and_a_long_one_is_cut() -> None:
    config = "non-default args: " + "x" * 4000  # vLLM's engine configuration line
    line = LineFormatter().format(_record(config))
    assert "\n" not in line and len(line) < 1200 and line.endswith("more chars]")
    failed = LineFormatter().format(_record("load failed\nsecond line", exc=True))
    assert "\n" not in failed and "load failed | second line" in failed and "ValueError: bad | value (at " in failed
    obj = json.loads(JsonFormatter().format(_record("load failed", exc=True)))
    assert obj["exception"].startswith("ValueError: bad") and "Traceback" in obj["traceback"]
    assert "\n" not in JsonFormatter().format(_record(config))
    assert LineFormatter(max_chars=None).format(_record(config)).endswith("x" * 100)  # a log file keeps it whole
