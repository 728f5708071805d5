"""``vlbatch webhooks list|deliveries`` run as the real command against a database holding two tenants' endpoints:
every endpoint with its state, an endpoint's deliveries with each attempt, no secret printed, an unknown id refused
with its code."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from tests.support.engine import child_env
from vlbatch.db import webhooks
from vlbatch.db.session import make_engine, make_sessionmaker, migrate


def _vlbatch(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env["VLBATCH_DATABASE_URL"] = db_url
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_webhooks_list_and_deliveries(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'cli.db'}"
    migrate(db_url)
    with make_sessionmaker(make_engine(db_url))() as s:
        acme = webhooks.create_endpoint(s, tenant="acme", url="https://a.example/h", events=["ping"], description=None)
        other = webhooks.create_endpoint(
            s, tenant="other", url="https://b.example/h", events=["job.completed"], description=None
        )
        d = webhooks.ping(s, endpoint=acme, retry_for=timedelta(hours=1))
        failed = webhooks.Attempt(ok=False, status_code=500, latency_ms=12, error_code="webhook_http_error")
        webhooks.record_attempt(
            s, delivery=d, attempt=failed, retry_at=d.next_attempt_at, disable_after=timedelta(days=1)
        )
        webhooks.update_endpoint(s, row=other, enabled=False)
        s.commit()
        secrets = (acme.secret, other.secret)

    listed = _vlbatch(db_url, "webhooks", "list")
    assert listed.returncode == 0, listed.stderr
    rows = sorted(line.split("\t") for line in listed.stdout.strip().splitlines())
    assert rows == sorted(
        [
            [acme.id, "acme", "enabled", "ping", "https://a.example/h"],
            [other.id, "other", "disabled (disabled by its owner)", "job.completed", "https://b.example/h"],
        ]
    )
    shown = _vlbatch(db_url, "webhooks", "deliveries", acme.id)
    assert shown.returncode == 0, shown.stderr
    [line] = shown.stdout.strip().splitlines()
    fields = line.split("\t")
    assert fields[:3] == [d.id, "ping", "pending"] and fields[-1] == "500/12ms"
    assert not any(secret in listed.stdout + shown.stdout for secret in secrets)

    missing = _vlbatch(db_url, "webhooks", "deliveries", "we_nope")
    assert missing.returncode != 0 and "webhook_not_found" in missing.stderr, missing.stderr
