"""deploy/kubernetes and ``vlbatch plan --render k8s``: every manifest of every overlay, and the rendered worker
sets, validate against the Kubernetes OpenAPI schemas (kubernetes-validate's, strict: unknown fields refused)
and KEDA's ScaledObject schema (tests/deploy/fixtures); and they keep what they promise: the grace period
outlasts the worker's drain bound, one chip per worker pod, probes that exist in the API and the image, KEDA
watching the very lists the publisher fills, scale to zero. No cluster or kustomize binary is needed."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from cli.kubernetes import grace_period_s, render_k8s, scaling
from engine.planning.planner import plan
from engine.planning.request import PlanRequest
from engine.planning.shapes import read_model_config
from jobs.publisher import queue_name
from tests.support.kustomize import build, merge
from vlbatch.settings import FLAT_NAMES, QueueKind, Settings

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
CONFIGS = ROOT / "tests" / "engine" / "fixtures" / "model_configs"
KEDA_SCHEMA = json.loads((Path(__file__).parent / "fixtures" / "keda-scaledobject.schema.json").read_text())
KUBERNETES_VERSION = "1.33"
OVERLAYS = {"ascend-310p": "huawei.com/Ascend310P", "cuda": "nvidia.com/gpu", "cpu": None}
CARDS = {"atlas-300i-duo": "huawei.com/Ascend310P", "nvidia-l4": "nvidia.com/gpu"}
QUEUES: tuple[str, ...] = QueueKind.__args__  # type: ignore[attr-defined]


def validate(doc: dict[str, Any]) -> None:
    """One manifest against its schema; raises what the schema refuses."""
    if doc["kind"] == "ScaledObject":
        jsonschema.validate(doc, KEDA_SCHEMA)
        for trigger in doc["spec"]["triggers"]:
            assert trigger["type"] == "redis"
            meta = trigger["metadata"]
            # KEDA's redis scaler (not its CRD) needs a list and an address, and reads the lengths as integers.
            assert meta["listName"] and ({"address", "host", "addressFromEnv", "hostFromEnv"} & set(meta))
            assert meta["listLength"].isdigit() and meta["activationListLength"].isdigit()
    else:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


BASE = build(KUBE / "base")  # the ConfigMap a rendered worker set runs with


def overlay(name: str) -> list[dict[str, Any]]:
    return build(KUBE / "overlays" / name)


def rendered(card: str = "atlas-300i-duo", **settings: Any) -> list[dict[str, Any]]:
    shape = read_model_config(CONFIGS / "qwen3-vl-8b-instruct.json")
    request = PlanRequest(card=card, cards=2, max_model_len=16384 if card == "atlas-300i-duo" else 8192)
    s = Settings(_env_file=None, **settings)  # type: ignore[call-arg]
    text = render_k8s(
        plan(shape, request),
        image="vlbatch:310p",
        chunk_size=s.scheduling.chunk_size,
        drain_timeout_s=s.worker.drain_timeout_s,
    )
    return [d for d in yaml.safe_load_all(text) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def workers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d for d in of_kind(docs, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    ]


def pod(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]


def env_of(container: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, str]:
    """The container's environment: its ConfigMaps (of ``docs``, else of the base a rendered set runs beside) first,
    then its own entries over them."""
    env: dict[str, str] = {}
    maps = {d["metadata"]["name"]: d["data"] for d in of_kind([*BASE, *docs], "ConfigMap")}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env |= maps[source["configMapRef"]["name"]]
    return env | {e["name"]: e["value"] for e in container.get("env", [])}


@pytest.mark.parametrize("name", OVERLAYS)
def test_every_overlay_manifest_validates(name: str) -> None:
    docs = overlay(name)
    assert {d["kind"] for d in docs} >= {"Deployment", "Service", "Job", "PodDisruptionBudget", "ScaledObject"}
    for doc in docs:
        validate(doc)


@pytest.mark.parametrize("card", CARDS)
def test_rendered_worker_set_validates(card: str) -> None:
    docs = rendered(card)
    assert [d["kind"] for d in docs] == ["Deployment", "PodDisruptionBudget", "ScaledObject"]
    for doc in docs:
        validate(doc)


def test_the_validators_refuse_what_a_cluster_would() -> None:
    """The checks above can fail: a misspelt field, a number where KEDA wants a string, a missing target."""
    worker = workers(overlay("cpu"))[0]
    misspelt = merge(worker, {"spec": {"template": {"spec": {"terminationGracePeriod": 120}}}})
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(misspelt)
    scaled = of_kind(overlay("cpu"), "ScaledObject")[0]
    numeric = merge(scaled, {"spec": {"triggers": [{"name": "vlbatch-model-batch", "metadata": {"listLength": 2}}]}})
    with pytest.raises(jsonschema.ValidationError):
        validate(numeric)
    untargeted = {**scaled, "spec": {k: v for k, v in scaled["spec"].items() if k != "scaleTargetRef"}}
    with pytest.raises(jsonschema.ValidationError):
        validate(untargeted)
    with pytest.raises(jsonschema.ValidationError):
        validate(merge(scaled, {"spec": {"minReplicas": 0}}))


@pytest.mark.parametrize("name", OVERLAYS)
def test_config_keys_are_settings(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every VLBATCH_ variable a pod gets is a setting that parses, so none is silently ignored."""
    docs = overlay(name)
    for deployment in of_kind(docs, "Deployment"):
        env = env_of(pod(deployment)["containers"][0], docs)
        unknown = {k for k in env if k.startswith("VLBATCH_") and k[8:].lower() not in FLAT_NAMES}
        assert not unknown, f"{deployment['metadata']['name']}: not settings: {unknown}"
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        Settings(_env_file=None)  # type: ignore[call-arg]


@pytest.mark.parametrize("source", [*OVERLAYS, "rendered"])
def test_grace_period_outlasts_the_drain_bound(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = rendered() if source == "rendered" else overlay(source)
    for worker in workers(docs):
        env = env_of(pod(worker)["containers"][0], docs)
        monkeypatch.setenv("VLBATCH_DRAIN_TIMEOUT_S", env["VLBATCH_DRAIN_TIMEOUT_S"])
        drain = Settings(_env_file=None).worker.drain_timeout_s  # type: ignore[call-arg]
        assert pod(worker)["terminationGracePeriodSeconds"] >= drain + 30, (drain, worker["metadata"]["name"])


def test_rendered_grace_period_follows_the_drain_setting() -> None:
    (worker, *_) = rendered(drain_timeout_s=600)
    assert pod(worker)["terminationGracePeriodSeconds"] == grace_period_s(600) > 600


@pytest.mark.parametrize("source", [*OVERLAYS, *CARDS])
def test_one_chip_per_worker_pod(source: str) -> None:
    docs = rendered(source) if source in CARDS else overlay(source)
    resource = {**OVERLAYS, **CARDS}[source]
    for worker in workers(docs):
        (container,) = pod(worker)["containers"]
        res = container["resources"]
        if resource is None:
            assert not any("/" in k for k in {**res.get("requests", {}), **res.get("limits", {})})
            continue
        assert res["limits"][resource] == res["requests"][resource] == "1"
        others = {k for k in {**res["requests"], **res["limits"]} if "/" in k} - {resource}
        assert not others
        env = env_of(container, docs)
        # The device plugin picks the chip; a pinned visibility variable would point at another pod's.
        assert not {"ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"} & set(env)


def test_api_probe_paths_answer(tmp_path: Path) -> None:
    from api.main import create_app

    settings = Settings(_env_file=None, database_url=f"sqlite:///{tmp_path}/db.sqlite", api_reconcile=False)  # type: ignore[call-arg]
    (api,) = [d for d in of_kind(overlay("cpu"), "Deployment") if d["metadata"]["name"] == "vlbatch-api"]
    (container,) = pod(api)["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    served = next(a for a in container["args"] if a.isdigit())
    with TestClient(create_app(settings)) as client:
        for probe in ("readinessProbe", "livenessProbe"):
            get = container[probe]["httpGet"]
            assert str(ports[get["port"]]) == served
            assert client.get(get["path"]).status_code == 200, get["path"]


@pytest.mark.parametrize("source", [*OVERLAYS, "rendered"])
def test_worker_probes_run_the_image_health_check(source: str) -> None:
    docs = rendered() if source == "rendered" else overlay(source)
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    workdir = re.search(r"^WORKDIR (\S+)", dockerfile, re.M)
    assert workdir
    script = (ROOT / "deploy" / "healthcheck.sh").read_text()
    for worker in workers(docs):
        container = pod(worker)["containers"][0]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            path, mode = container[probe]["exec"]["command"]
            relative = Path(path).relative_to(workdir.group(1))
            assert (ROOT / relative).is_file() and f"./{relative.parent}/" in dockerfile  # in the repo and the image
            assert f"\n    {mode})" in script
            assert container[probe]["timeoutSeconds"] > 20  # the script's Celery ping waits up to 20 s
        # The heartbeat the script reads is the one the worker touches.
        assert Settings(
            _env_file=None,
            heartbeat_file=env_of(container, docs)[  # type: ignore[call-arg]
                "VLBATCH_HEARTBEAT_FILE"
            ],
        ).worker.heartbeat_file


@pytest.mark.parametrize("source", [*OVERLAYS, "rendered"])
def test_keda_watches_the_model_queues_and_scales_to_zero(source: str) -> None:
    docs = rendered() if source == "rendered" else overlay(source)
    config = env_of({"envFrom": [{"configMapRef": {"name": "vlbatch-config"}}]}, BASE)
    for scaled in of_kind(docs, "ScaledObject"):
        (target,) = [d for d in workers(docs) if d["metadata"]["name"] == scaled["spec"]["scaleTargetRef"]["name"]]
        model = env_of(pod(target)["containers"][0], BASE)["VLBATCH_MODEL_NAME"]
        lists = [t["metadata"]["listName"] for t in scaled["spec"]["triggers"]]
        assert lists == [queue_name(model, q) for q in QUEUES]
        assert scaled["spec"]["minReplicaCount"] == 0
        assert "replicas" not in target["spec"]  # KEDA's to set: a re-apply must not scale the set
        assert all(t["metadata"]["activationListLength"] == "0" for t in scaled["spec"]["triggers"])
        for trigger in scaled["spec"]["triggers"]:
            assert trigger["metadata"]["addressFromEnv"] in config
            assert config["VLBATCH_BROKER_URL"].endswith(
                f"{config['KEDA_REDIS_ADDRESS']}/{trigger['metadata']['databaseIndex']}"
            )
        (budget,) = [
            d for d in of_kind(docs, "PodDisruptionBudget") if d["metadata"]["name"] == target["metadata"]["name"]
        ]
        labels = target["spec"]["template"]["metadata"]["labels"]
        assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert target["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_thresholds_follow_the_planner_items_per_second() -> None:
    shape = read_model_config(CONFIGS / "qwen3-vl-8b-instruct.json")
    p = plan(shape, PlanRequest(cards=2, max_model_len=16384))
    per_s = p.roofline.items_per_hour_estimate / 3600
    s = scaling(p, chunk_size=8, backlog_s=600)
    assert s.list_length == math.ceil(per_s * 600 / 8) > 1  # chunks a worker clears in the backlog time
    assert s.max_replicas == len(p.engines) == 4
    (_, _, scaled) = rendered(chunk_size=8)
    assert scaled["spec"]["maxReplicaCount"] == 4
    fewer = scaling(p, chunk_size=64, backlog_s=600).list_length
    assert fewer < s.list_length  # bigger chunks: fewer queued messages make the same backlog


def test_cli_plan_render_k8s() -> None:
    from cli.main import app

    result = CliRunner().invoke(
        app, ["plan", str(CONFIGS / "qwen3-vl-8b-instruct.json"), "--max-model-len", "16384", "--render", "k8s"]
    )
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.output) if d]
    assert [d["kind"] for d in docs] == ["Deployment", "PodDisruptionBudget", "ScaledObject"]
    assert "items/s per worker" in result.output


def test_cli_render_compose_is_the_compose_file() -> None:
    from cli.main import app

    config = str(CONFIGS / "qwen3-vl-8b-instruct.json")
    runner = CliRunner()
    rendered_compose = runner.invoke(app, ["plan", config, "--max-model-len", "16384", "--render", "compose"])
    flag = runner.invoke(app, ["plan", config, "--max-model-len", "16384", "--compose"])
    assert rendered_compose.exit_code == flag.exit_code == 0
    assert rendered_compose.output == flag.output and "services:" in flag.output
