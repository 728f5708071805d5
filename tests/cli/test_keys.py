"""``vlbatch keys create|list|revoke`` run as the real command (a subprocess) against SQLite and PostgreSQL, and
the keys they make and revoke checked against the API over real HTTP."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from api.main import create_app
from tests.support.engine import child_env
from vlbatch.db.models import ApiKey
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings


def _vlbatch(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env["VLBATCH_DATABASE_URL"] = db_url
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_keys_create_list_revoke(db_url: str, redis_url: str, tmp_path: Path, serve: type) -> None:
    made = _vlbatch(db_url, "keys", "create", "--tenant", "acme", "--name", "ci runner")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("vlb_") and len(key) >= 40 and "\n" not in key
    assert "not shown again" in made.stderr
    admin = _vlbatch(db_url, "keys", "create", "--tenant", "ops", "--admin").stdout.strip()

    listed = _vlbatch(db_url, "keys", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.strip().splitlines()
    assert len(lines) == 2
    first = lines[0].split("\t")
    assert first[1:4] == ["acme", "tenant", "ci runner"] and first[4] == key[:12] + "..." and first[-1] == "live"
    assert lines[1].split("\t")[1:3] == ["ops", "admin"]
    assert key not in listed.stdout and admin not in listed.stdout  # no secret is ever listed
    with make_sessionmaker(make_engine(db_url))() as s:  # only hashes at rest
        stored = {c for k in s.query(ApiKey) for c in (k.secret_hash, k.prefix, k.name or "")}
    assert key not in stored and admin not in stored

    root = tmp_path / "album"
    root.mkdir()
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="tiny", allowed_input_roots=[root])
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        auth = {"Authorization": f"Bearer {key}"}
        assert c.get("/v1/errors", headers=auth).status_code == 200
        assert c.get("/metrics", headers=auth).status_code == 403
        assert c.get("/metrics", headers={"X-API-Key": admin}).status_code == 200

        revoked = _vlbatch(db_url, "keys", "revoke", first[0])
        assert revoked.returncode == 0 and f"key {first[0]} revoked" in revoked.stdout
        r = c.get("/v1/errors", headers=auth)
        assert (r.status_code, r.json()["code"]) == (401, "unauthorized")
        assert c.get("/metrics", headers={"X-API-Key": admin}).status_code == 200  # the other key lives on

    with make_sessionmaker(make_engine(db_url))() as s:
        assert s.get(ApiKey, int(first[0])).revoked_at is not None  # type: ignore[union-attr]
    unknown = _vlbatch(db_url, "keys", "revoke", "999")
    assert unknown.returncode == 1 and "error key_not_found" in unknown.stderr


def test_keys_roots_sets_lists_and_clears_a_tenants_roots_inside_the_global_ones(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'roots.db'}"
    root = tmp_path / "shared"
    (root / "acme").mkdir(parents=True)
    env = child_env()
    env.update(
        VLBATCH_DATABASE_URL=db_url,
        VLBATCH_ALLOWED_INPUT_ROOTS=str(root),
        VLBATCH_ALLOWED_S3_PREFIXES="s3://acme-bucket,s3://other-bucket",
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "cli.main", "keys", "roots", *args]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)

    default = run("acme")
    assert default.returncode == 0 and "the global VLBATCH_ALLOWED_INPUT_ROOTS" in default.stdout
    made = run("acme", "--input", str(root / "acme"))
    assert made.returncode == 0, made.stderr
    assert f"inputs {root / 'acme'}" in made.stdout and f"outputs {root / 'acme'}" in made.stdout
    outside = run("acme", "--input", str(tmp_path))
    assert outside.returncode != 0 and "invalid_tenant_roots" in outside.stderr, outside.stderr
    listed = run()
    assert listed.stdout.startswith(f"acme\tinputs {root / 'acme'}\toutputs (its inputs)")
    assert "object storage s3://acme-bucket, s3://other-bucket" in made.stdout  # the global prefixes by default
    own = run("acme", "--input", str(root / "acme"), "--s3", "s3://acme-bucket/photos/")
    assert own.returncode == 0 and "object storage s3://acme-bucket/photos\n" in own.stdout, own.stderr
    assert run().stdout.rstrip().endswith("\ts3 s3://acme-bucket/photos")
    sibling = run("acme", "--s3", "s3://acme-bucket-2")  # not inside a global prefix
    assert sibling.returncode != 0 and "invalid_tenant_roots" in sibling.stderr
    cleared = run("acme", "--clear")
    assert cleared.returncode == 0 and "the global VLBATCH_ALLOWED_INPUT_ROOTS" in cleared.stdout
    assert run().stdout == ""
