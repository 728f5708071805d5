"""deploy/: the compose file parses, each worker owns only its chip, it matches what the planner emits, and the
Dockerfile and systemd units say what the deployment needs. Docker itself cannot run here."""

from __future__ import annotations

import configparser
import io
import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from engine.planning.command import run_plan
from engine.runtime.config import EngineConfig

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CONFIGS = ROOT / "tests" / "engine" / "fixtures" / "model_configs"
CONTROL = {"/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"}


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def workers(doc: dict) -> dict[str, dict]:
    return {k: v for k, v in doc["services"].items() if k.startswith("worker")}


def test_services_present() -> None:
    doc = compose()
    assert {"api", "redis", "postgres"} <= set(doc["services"])
    assert len(workers(doc)) == 2  # one 300I Duo card: one engine per chip
    api = doc["services"]["api"]
    assert api["command"] == ["vlbatch", "api", "--host", "0.0.0.0", "--port", "8000"]
    assert "api" in api["healthcheck"]["test"]


def test_each_worker_mounts_only_its_chip() -> None:
    owners: dict[str, str] = {}
    for name, svc in workers(compose()).items():
        devices = set(svc["devices"])
        chips = sorted(d for d in devices - CONTROL if d.startswith("/dev/davinci"))
        assert len(chips) == 1, (name, chips)
        assert devices - CONTROL == set(chips) and devices >= CONTROL
        env = svc["environment"]
        assert chips[0] == f"/dev/davinci{env['ASCEND_RT_VISIBLE_DEVICES']}"
        assert chips[0] not in owners, f"{name} and {owners.get(chips[0])} share {chips[0]}"
        owners[chips[0]] = name
        assert svc["command"] == ["vlbatch", "worker"]
        assert svc["hostname"] == name  # the health check pings celery@<hostname>
        for key in ("VLBATCH_MODEL_PATH", "VLBATCH_MODEL_NAME", "VLBATCH_DATABASE_URL", "VLBATCH_BROKER_URL"):
            assert env[key], key
        ec = EngineConfig.model_validate({**json.loads(env["VLBATCH_ENGINE"]), "model": env["VLBATCH_MODEL_PATH"]})
        assert ec.dtype == "float16" and 0.85 <= ec.gpu_memory_utilization <= 0.88 and ec.max_model_len <= 16384
        assert "/usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/:ro" in svc["volumes"]
        assert svc["healthcheck"]["test"][-1] == "worker" and svc["restart"] == "unless-stopped"


def test_compose_is_what_the_planner_emits(tmp_path: Path) -> None:
    # deploy/compose.yaml was written by:
    #   vlbatch plan <dir Qwen3-VL-8B-Instruct with that config.json> --max-model-len 16384 --compose
    model = tmp_path / "Qwen3-VL-8B-Instruct"
    model.mkdir()
    shutil.copy(CONFIGS / "qwen3-vl-8b-instruct.json", model / "config.json")
    out, err = io.StringIO(), io.StringIO()
    assert run_plan(model, compose=True, out=out, err=err, max_model_len=16384) == 0, err.getvalue()
    assert yaml.safe_load(out.getvalue()) == compose()


def test_dockerfile_builds_on_the_310p_image() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    froms = [ln for ln in text.splitlines() if ln.startswith("FROM ")]
    assert froms == ["FROM quay.io/ascend/vllm-ascend:${VLLM_ASCEND_VERSION}-310p"]
    # No extra that could replace the image's vLLM or torch: only s3 (boto3, for s3:// inputs).
    assert 'pip install ".[s3]" ' in text
    assert "torch" not in str(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["s3"]
    )
    assert "triton-ascend" in text
    assert 'ENTRYPOINT ["/opt/vlbatch/deploy/entrypoint.sh"]' in text
    # The pinned release's CANN and torch_npu are the validated stack's (ascend_matrix), checked at build, and the
    # image runs the multimodal-merge plugin (installed with vlbatch) on auto.
    from engine.platforms.ascend_matrix import ATLAS_300I_DUO

    pins = {p.package: p.version for p in ATLAS_300I_DUO.pins}
    assert f"ARG VLLM_ASCEND_VERSION=v{pins['vllm-ascend']}" in text
    assert f"ARG CANN_VERSION={pins['cann']}" in text
    assert f"ARG TORCH_NPU_VERSION={pins['torch-npu']}" in text
    assert "mm_merge.plugin_registered()" in text and "find_spec('triton') is None" in text
    assert "VLBATCH_MM_MERGE=auto" in text


def test_310p_workers_run_the_multimodal_merge_fix_on_auto() -> None:
    workers = {n: s for n, s in compose()["services"].items() if "VLBATCH_ENGINE" in s.get("environment", {})}
    assert workers and all(s["environment"]["VLBATCH_MM_MERGE"] == "auto" for s in workers.values())
    k8s = (DEPLOY / "kubernetes" / "overlays" / "ascend-310p" / "worker.yaml").read_text()
    assert '- name: VLBATCH_MM_MERGE\n              value: "auto"' in k8s


def _unit(name: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string((DEPLOY / "systemd" / name).read_text())
    return cp


def test_systemd_units() -> None:
    api = _unit("vlbatch-api.service")
    assert api["Service"]["ExecStart"].endswith("vlbatch api --host 0.0.0.0 --port 8000")
    worker = _unit("vlbatch-worker@.service")
    assert worker["Service"]["ExecStart"].endswith("vlbatch worker")
    assert "/etc/vlbatch/worker-%i.env" in (DEPLOY / "systemd" / "vlbatch-worker@.service").read_text()
    assert worker["Service"]["Restart"] == "always"
    health = (DEPLOY / "systemd" / "vlbatch-worker-health@.service").read_text()
    assert "Environment=VLBATCH_HEALTH_RESTART_UNIT=vlbatch-worker@%i.service" in health
    assert _unit("vlbatch-worker-health@.service")["Service"]["ExecStart"].endswith("healthcheck.sh worker")
    assert _unit("vlbatch-worker-health@.timer")["Timer"]["OnUnitActiveSec"] == "60s"


@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX shell")
def test_scripts_parse_and_healthcheck_counts_failures(tmp_path: Path) -> None:
    for script in ("healthcheck.sh", "entrypoint.sh"):
        shell = "bash" if script == "entrypoint.sh" else "sh"
        if shutil.which(shell):
            subprocess.run([shell, "-n", str(DEPLOY / script)], check=True, timeout=10)
    state = tmp_path / "state"
    env = {"PATH": "/usr/bin:/bin", "VLBATCH_HEALTH_STATE": str(state), "VLBATCH_API_PORT": "9"}
    for n in (1, 2):
        r = subprocess.run(["sh", str(DEPLOY / "healthcheck.sh"), "api"], env=env, capture_output=True, timeout=30)
        assert r.returncode == 1
        assert state.read_text().strip() == str(n)
