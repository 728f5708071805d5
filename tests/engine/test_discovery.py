"""Chips versus configuration: missing, shared, unused, unhealthy and busy chips, on real and variant tables,
through the Ascend platforms; and the worker's preflight, which refuses on any of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import discovery
from engine.platforms import get_platform, npu_smi
from engine.platforms.ascend import inventory
from engine.platforms.reports import Finding, Inventory

FIX = Path(__file__).parent / "fixtures" / "npu_smi"
P310 = get_platform("ascend-310p")
check_assignment = P310.check_assignment


def inv(name: str) -> Inventory:
    return inventory(npu_smi.parse_info((FIX / name).read_text()))


def errors(found: list[Finding]) -> list[str]:
    return [f.message for f in found if f.level == "error"]


def warnings(found: list[Finding]) -> list[str]:
    return [f.message for f in found if f.level == "warning"]


def test_cards_group_the_two_chips_of_a_duo() -> None:
    i = inv("info_310p3_4cards_8chips_drv25.3.rc1_idle.txt")
    cards = i.cards()
    assert len(cards) == 4
    assert [c.device_id for c in cards[(32768, "0000:81:00.0")]] == [4, 5]
    assert i.chips[0].free_mb == 44278 - 1615


def test_field_failure_config_0123_on_chips_0145() -> None:
    i = inv("variant_310p3_2cards_devices_0_1_4_5.txt")
    found = check_assignment(i, instances={}, visible=[0, 1, 2, 3])
    errs = errors(found)
    assert len(errs) == 1
    assert "ASCEND_RT_VISIBLE_DEVICES names 2,3 but npu-smi shows chips 0,1,4,5" in errs[0]
    assert errs[0].endswith("set ASCEND_RT_VISIBLE_DEVICES=0,1,4,5")
    assert any("chips 4,5 are present and healthy but no instance uses them" in w for w in warnings(found))


def test_instances_naming_missing_chips_get_the_unused_ones_as_the_fix() -> None:
    i = inv("variant_310p3_2cards_devices_0_1_4_5.txt")
    found = check_assignment(i, instances={"a": [0, 1], "b": [2, 3]})
    assert errors(found) == [
        "instance 'b' is configured for chips 2,3 but 2,3 do not exist (npu-smi shows 0,1,4,5):"
        " replace them with unused chips 4,5"
    ]


def test_two_instances_on_one_chip_is_refused() -> None:
    i = inv("info_310p3_4cards_8chips_drv25.3.rc1_idle.txt")
    found = check_assignment(i, instances={"a": [0, 1], "b": [1, 2]}, tensor_parallel_size=2)
    errs = errors(found)
    assert len(errs) == 1 and errs[0].startswith("chip 1 is shared by instances 'a', 'b'")
    assert "KV cache" in errs[0]


def test_a_clean_assignment_has_no_findings() -> None:
    i = inv("info_310p3_4cards_8chips_drv25.3.rc1_idle.txt")
    instances = {f"i{n}": [2 * n, 2 * n + 1] for n in range(4)}
    assert check_assignment(i, instances=instances, visible=list(range(8)), tensor_parallel_size=2) == []


def test_tensor_parallel_size_must_match_each_instance() -> None:
    i = inv("info_310p3_1card_2chips_drv25.2.0.txt")
    errs = errors(check_assignment(i, instances={"a": [0, 1]}, tensor_parallel_size=1))
    assert errs == [
        "instance 'a' has 2 chips (0,1) but tensor_parallel_size=1: give it exactly 1 chips or change the"
        " engine's tensor_parallel_size"
    ]


def test_default_engine_takes_the_first_chip_and_the_rest_are_reported_unused() -> None:
    i = inv("info_310p3_4cards_8chips_drv25.3.rc1_idle.txt")
    found = check_assignment(i, instances={})
    assert errors(found) == []
    assert warnings(found) == [
        "chips 1,2,3,4,5,6,7 are present and healthy but no instance uses them: add them to an instance or start"
        " another one with ASCEND_RT_VISIBLE_DEVICES=1,2,3,4,5,6,7"
    ]


def test_critical_chip_in_use_is_an_error_and_idle_is_a_warning() -> None:
    i = inv("info_310p3_4cards_8chips_drv25.0.rc1_one_chip_critical.txt")
    used = check_assignment(i, instances={"a": [4, 5]})
    assert any(m.startswith("chip 4 (NPU 4 chip 0, 0000:81:00.0) health is Critical") for m in errors(used))
    idle = check_assignment(i, instances={"a": [0, 1]})
    assert errors(idle) == []
    assert any("health is Critical: keep it out of every instance" in w for w in warnings(idle))


def test_warning_health_is_a_warning_even_when_used() -> None:
    i = inv("variant_310p3_2cards_chip3_warning_chip0_97C.txt")
    found = check_assignment(i, instances={"a": [2, 3]})
    assert errors(found) == []
    assert any("chip 3 (NPU 32832 chip 1, 0000:83:00.0) health is Warning" in w for w in warnings(found))


def test_busy_chip_names_the_pids_holding_it() -> None:
    i = inv("info_310p3_4cards_8chips_drv25.3.rc1_in_container_busy.txt")
    assert i.chips[0].pids == (326429, 326430) and i.chips[0].process_mb == 33842 + 108
    # In the doctor the holder may be this host's own worker: a warning with the fix.
    found = check_assignment(i, instances={"a": [0]})
    busy = [w for w in warnings(found) if "chip 0 (NPU 0 chip 0" in w]
    assert len(busy) == 1 and "by pid 326429, 326430" in busy[0]
    assert "stop that process (kill 326429 326430, or stop the container that runs it)" in busy[0]
    # The free chips are named as the other fix: healthy, not held, not in an instance.
    assert busy[0].endswith("or give this engine free chips with ASCEND_RT_VISIBLE_DEVICES=2,3,4,5,6,7")


def test_910b_without_device_column_uses_the_mapping_or_npu_id() -> None:
    info = npu_smi.parse_info((FIX / "info_910b3_8npus_drv25.2.0_idle.txt").read_text())
    assert inventory(info).device_ids == list(range(8))
    mapping = [npu_smi.MappingRow(n, 0, 7 - n, "Ascend 910B3") for n in range(8)]
    assert [c.device_id for c in inventory(info, mapping).chips] == [7, 6, 5, 4, 3, 2, 1, 0]


def test_repeated_device_ids_are_refused() -> None:
    info = npu_smi.parse_info((FIX / "info_910b3_8npus_drv25.2.0_idle.txt").read_text())
    mapping = [npu_smi.MappingRow(n, 0, 0, "Ascend 910B3") for n in range(8)]
    with pytest.raises(npu_smi.NpuSmiError, match="with repeats"):
        inventory(info, mapping)


def _binary(tmp_path: Path, fixture: str) -> str:
    path = tmp_path / fixture.replace(".txt", "") / "npu-smi"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!/bin/sh\ncat '{FIX / fixture}'\n")
    path.chmod(0o755)
    return str(path)


def test_worker_preflight_checks_only_its_own_chips(tmp_path: Path) -> None:
    binary = _binary(tmp_path, "variant_310p3_2cards_devices_0_1_4_5.txt")
    assert discovery.preflight(visible=[4, 5], tensor_parallel_size=2, binary=binary) == []
    bad = discovery.preflight(visible=[2, 3], tensor_parallel_size=2, binary=binary)
    assert [f.kind for f in bad] == ["visible"]
    assert bad[0].message.endswith("set ASCEND_RT_VISIBLE_DEVICES=0,1")
    busy = discovery.preflight(
        visible=[0],
        tensor_parallel_size=1,
        binary=_binary(tmp_path, "info_310p3_4cards_8chips_drv25.3.rc1_in_container_busy.txt"),
    )
    # At worker start nothing of ours runs yet: a held chip is refused (docs/operations-310p.md's promise).
    assert [(f.level, f.kind) for f in busy] == [("error", "busy")]
    assert "kill 326429 326430" in busy[0].message


def test_worker_preflight_names_the_platform_or_detects_it(tmp_path: Path) -> None:
    # A 910B host: no Device column, so the logical ids come from ``npu-smi info -m``.
    info = FIX / "info_910b3_8npus_drv25.2.0_idle.txt"
    mapping = tmp_path / "mapping.txt"
    rows = "".join(f"{n}    0    {n}    Ascend 910B3\n" for n in range(8))
    mapping.write_text("NPU ID    Chip ID    Chip Logic ID    Chip Name\n" + rows)
    binary = tmp_path / "bin910" / "npu-smi"
    binary.parent.mkdir()
    binary.write_text(f'#!/bin/sh\nif [ "$2" = "-m" ]; then cat "{mapping}"; else cat "{info}"; fi\n')
    binary.chmod(0o755)
    # Detected from the chip names npu-smi prints; idle 910B3 chips show ~3.4 GB in use, below its threshold.
    assert discovery.preflight(visible=[0, 1], tensor_parallel_size=2, binary=str(binary)) == []
    p910 = get_platform("ascend-910b", npu_smi=str(binary))
    bad = discovery.preflight(visible=[8], tensor_parallel_size=1, platform=p910)
    assert [f.kind for f in bad] == ["visible"] and "npu-smi shows chips 0,1,2,3,4,5,6,7" in bad[0].message
    # A 310P worker named on a host without npu-smi or device nodes refuses, with the mount to add.
    absent = str(tmp_path / "absent")
    refused = discovery.preflight(visible=None, tensor_parallel_size=1, binary=absent, platform="ascend-310p")
    assert [(f.level, f.kind) for f in refused] == [("error", "npu-smi")]
    assert "-v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi" in refused[0].message


def test_worker_preflight_without_npu_smi_or_with_a_broken_driver(tmp_path: Path) -> None:
    # Nothing configured and nothing detected: a CPU host, nothing to check.
    assert discovery.preflight(visible=None, tensor_parallel_size=1, binary=str(tmp_path / "absent")) == []
    # Chips configured but none on the host: they are missing, so the worker refuses and says how to see them.
    missing = discovery.preflight(visible=[0, 1], tensor_parallel_size=2, binary=str(tmp_path / "absent"))
    assert [(f.level, f.kind) for f in missing] == [("error", "npu-smi")]
    assert "not found on PATH" in missing[0].message
    broken = discovery.preflight(
        visible=None, tensor_parallel_size=1, binary=_binary(tmp_path, "error_npu-smi_in_container_dcmi_-8005.txt")
    )
    assert [(f.level, f.kind) for f in broken] == [("error", "npu-smi")] and "-8005" in broken[0].message
