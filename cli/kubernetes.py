"""``vlbatch plan --render k8s``: a plan as the Kubernetes worker set of one served model.

What it writes: a Deployment whose pods each hold one engine (one chip at TP1, requested through the platform's
device-plugin resource, e.g. ``huawei.com/Ascend310P``), a PodDisruptionBudget, and a KEDA ScaledObject on the
model's Redis queues that scales the set to zero when they are empty. The pods take what every pod shares
(broker, database, drain bound, input roots) from the ``vlbatch-config`` ConfigMap and ``vlbatch-secrets`` Secret
of ``deploy/kubernetes/base``; the plan decides the engine arguments, chips per pod, the replica ceiling and
the queue-depth thresholds.

Thresholds: one queue message is one chunk of ``chunk_size`` items, so a worker at the planner's estimated items/s
clears ``items/s x backlog_s / chunk_size`` messages in ``backlog_s``: that is ``listLength``, the backlog KEDA
keeps per replica. ``activationListLength`` 0 wakes the set from zero at the first message.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, get_args

import yaml

from engine.planning.planner import Plan
from jobs.publisher import queue_name
from vlbatch.settings import QueueKind

# After the drain the worker closes its engine and Celery stops: vLLM's shutdown of a loaded engine takes seconds
# to tens of seconds on a busy chip, so the kubelet's SIGKILL waits this long past the drain bound.
SHUTDOWN_SLACK_S = 60
HEALTHCHECK = "/opt/vlbatch/deploy/healthcheck.sh"  # deploy/healthcheck.sh, copied there by deploy/Dockerfile
HEARTBEAT_FILE = "/tmp/vlbatch-heartbeat"
REDIS_ADDRESS_ENV = "KEDA_REDIS_ADDRESS"  # host:port of the broker, in vlbatch-config, read by KEDA's trigger


@dataclass(frozen=True)
class Scaling:
    """KEDA's thresholds for one model's worker set."""

    items_per_s_per_worker: float
    list_length: int
    activation_list_length: int
    max_replicas: int
    cooldown_s: int


def scaling(p: Plan, *, chunk_size: int, backlog_s: float) -> Scaling:
    """Thresholds from the planner's estimated items/s per engine (see the module docstring)."""
    per_worker = p.roofline.items_per_hour_estimate / 3600
    list_length = max(1, math.ceil(per_worker * backlog_s / chunk_size))
    # Scale in only after a quiet spell at least as long as the backlog one replica is sized for.
    return Scaling(per_worker, list_length, 0, max(1, len(p.engines)), max(300, math.ceil(backlog_s)))


def grace_period_s(drain_timeout_s: float) -> int:
    """``terminationGracePeriodSeconds`` for a worker: above its drain bound, so SIGKILL never cuts a drain."""
    return math.ceil(drain_timeout_s) + SHUTDOWN_SLACK_S


def dns_name(model: str) -> str:
    """``model`` as a DNS-1123 label fragment (lower case, digits and dashes), for object names."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    return slug[:40].rstrip("-") or "model"


def _worker_probe(period_s: int, failures: int) -> dict[str, Any]:
    return {
        "exec": {"command": [HEALTHCHECK, "worker"]},
        "periodSeconds": period_s,
        "timeoutSeconds": 45,
        "failureThreshold": failures,
    }


def worker_manifests(
    p: Plan,
    *,
    image: str,
    chunk_size: int,
    drain_timeout_s: float,
    backlog_s: float = 120.0,
    queues: tuple[str, ...] = get_args(QueueKind),
) -> list[dict[str, Any]]:
    """The Deployment, PodDisruptionBudget and ScaledObject of the plan's model."""
    model = p.shape.name
    name = f"vlbatch-worker-{dns_name(model)}"
    labels = {"app.kubernetes.io/name": "vlbatch", "app.kubernetes.io/component": "worker", "vlbatch/model": name}
    env = {k: v for k, v in p.engines[0].env.items() if k != p.platform.device_control_env_var}
    env |= {"VLBATCH_MODEL_PATH": f"/models/{model}", "VLBATCH_MODEL_NAME": model}
    chips = p.tp  # one engine a pod: one chip at TP1
    resource = p.platform.kubernetes_resource
    resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": "16Gi"}, "limits": {"memory": "32Gi"}}
    if resource:
        resources["requests"][resource] = str(chips)
        resources["limits"][resource] = str(chips)
    mounts = [{"name": "models", "mountPath": "/models", "readOnly": True}, {"name": "shm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [
        {"name": "models", "persistentVolumeClaim": {"claimName": "vlbatch-models", "readOnly": True}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
    ]
    for n, mount in enumerate(p.platform.compose_mounts()):  # driver libraries and tools from the node
        host_path, _, container_path = mount.partition(":")
        mounts.append({"name": f"host-{n}", "mountPath": container_path or host_path, "readOnly": True})
        volumes.append({"name": f"host-{n}", "hostPath": {"path": host_path}})
    container = {
        "name": "worker",
        "image": image,
        "args": ["vlbatch", "worker"],  # behind the image's entrypoint (the CANN environment)
        "envFrom": [{"configMapRef": {"name": "vlbatch-config"}}, {"secretRef": {"name": "vlbatch-secrets"}}],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "resources": resources,
        "volumeMounts": mounts,
        # Engine load and graph capture take minutes on an NPU: the startup probe allows 20 of them.
        "startupProbe": _worker_probe(30, 40),
        "readinessProbe": _worker_probe(60, 3),
        "livenessProbe": _worker_probe(60, 3),
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            # No replicas: KEDA owns the count, and a re-apply must not reset it.
            "selector": {"matchLabels": {"vlbatch/model": name}},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "terminationGracePeriodSeconds": grace_period_s(drain_timeout_s),
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"vlbatch/model": name}}},
    }
    s = scaling(p, chunk_size=chunk_size, backlog_s=backlog_s)
    triggers = [
        {
            "type": "redis",
            "name": queue.replace(".", "-"),
            "metadata": {
                "addressFromEnv": REDIS_ADDRESS_ENV,
                "listName": queue_name(model, queue),
                "listLength": str(s.list_length),
                "activationListLength": str(s.activation_list_length),
                "databaseIndex": "0",
            },
        }
        for queue in queues
    ]
    scaled = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "scaleTargetRef": {"name": name},
            "minReplicaCount": 0,
            "maxReplicaCount": s.max_replicas,
            "pollingInterval": 15,
            "cooldownPeriod": s.cooldown_s,
            "triggers": triggers,
        },
    }
    return [deployment, budget, scaled]


def render_k8s(p: Plan, *, image: str, chunk_size: int, drain_timeout_s: float, backlog_s: float = 120.0) -> str:
    """The worker set as one multi-document YAML file, headed by the figures it was sized from."""
    s = scaling(p, chunk_size=chunk_size, backlog_s=backlog_s)
    head = [
        f"# Generated by `vlbatch plan ... --render k8s` for {p.shape.name} {p.quantization.upper()} on "
        f"{p.request.cards} x {p.card.key}: up to {s.max_replicas} worker pod(s), {p.tp} chip(s) each.",
        f"# Estimated {s.items_per_s_per_worker:.2f} items/s per worker; chunks of {chunk_size} items; KEDA keeps "
        f"{s.list_length} queued chunk(s) per replica (~{backlog_s:.0f} s of work) and scales to zero when idle.",
        f"# terminationGracePeriodSeconds {grace_period_s(drain_timeout_s)} = drain bound {drain_timeout_s:g} s "
        f"(VLBATCH_DRAIN_TIMEOUT_S) + {SHUTDOWN_SLACK_S} s to close the engine.",
        "# Add this file to an overlay of deploy/kubernetes (resources:), beside base's API, config and migration.",
    ]
    manifests = worker_manifests(
        p, image=image, chunk_size=chunk_size, drain_timeout_s=drain_timeout_s, backlog_s=backlog_s
    )
    return "\n".join(head) + "\n" + yaml.safe_dump_all(manifests, sort_keys=False, width=120)
