"""npu-smi parsing on the real outputs in fixtures/npu_smi (copied verbatim) and on our variants."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engine.platforms import npu_smi

FIX = Path(__file__).parent / "fixtures" / "npu_smi"


def read(name: str) -> str:
    return (FIX / name).read_text()


@pytest.mark.parametrize(
    ("name", "version", "chips", "processes"),
    [
        ("info_310p3_1card_2chips_drv25.2.0.txt", "25.2.0", 2, 0),
        ("info_310p3_2cards_4chips_drv24.1.0.1_with_processes.txt", "24.1.0.1", 4, 4),
        ("info_310p3_2cards_4chips_drv25.2.0_idle.txt", "25.2.0", 4, 0),
        ("info_310p3_4cards_8chips_drv25.0.rc1_one_chip_critical.txt", "25.0.rc1.b033", 8, 0),
        ("info_310p3_4cards_8chips_drv25.3.rc1_idle.txt", "25.3.rc1", 8, 0),
        ("info_310p3_4cards_8chips_drv25.3.rc1_in_container_busy.txt", "25.3.rc1", 8, 3),
        ("info_310p3_6npus_1chip_each_21527MB_drv25.2.0.txt", "25.2.0", 6, 0),
        ("info_910b3_8npus_drv24.1.0_busy_vllm_tp8.txt", "24.1.0", 8, 15),
        ("info_910b3_8npus_drv25.2.0_idle.txt", "25.2.0", 8, 0),
    ],
)
def test_every_real_table_parses(name: str, version: str, chips: int, processes: int) -> None:
    info = npu_smi.parse_info(read(name))
    assert info.version == version
    assert len(info.chips) == chips
    assert len(info.processes) == processes
    for c in info.chips:
        assert 0 < c.memory_used_mb < c.memory_total_mb
        assert c.temp_c is not None and 20 <= c.temp_c <= 100


def test_300i_duo_chips_share_npu_id_and_bus_id_with_large_npu_ids() -> None:
    info = npu_smi.parse_info(read("info_310p3_4cards_8chips_drv25.3.rc1_idle.txt"))
    got = [(c.npu_id, c.chip_id, c.device_id, c.bus_id) for c in info.chips]
    assert got[4:6] == [(32768, 0, 4, "0000:81:00.0"), (32768, 1, 5, "0000:81:00.0")]
    first = info.chips[0]
    assert (first.name, first.health, first.power_w, first.temp_c) == ("310P3", "OK", None, 51)
    assert (first.memory_used_mb, first.memory_total_mb, first.aicore_pct) == (1615, 44278, 0)


def test_310p_memory_without_space_before_slash_and_hugepages() -> None:
    info = npu_smi.parse_info(read("info_310p3_2cards_4chips_drv24.1.0.1_with_processes.txt"))
    chip = info.chips[2]
    assert (chip.memory_used_mb, chip.memory_total_mb) == (35563, 44280)
    assert (chip.hugepages_used, chip.hugepages_total) == (17057, 17057)
    assert info.processes[0] == npu_smi.ProcessRow(1, 0, 3277562, "mindie_llm_back", 14513)


def test_critical_health_is_kept_as_printed() -> None:
    info = npu_smi.parse_info(read("info_310p3_4cards_8chips_drv25.0.rc1_one_chip_critical.txt"))
    assert [(c.npu_id, c.chip_id) for c in info.chips if c.health != "OK"] == [(4, 0)]
    assert info.chips[4].health == "Critical"


def test_process_rows_with_empty_names_in_a_container() -> None:
    info = npu_smi.parse_info(read("info_310p3_4cards_8chips_drv25.3.rc1_in_container_busy.txt"))
    assert [(p.chip_id, p.pid, p.name, p.memory_mb) for p in info.processes] == [
        (0, 326429, "", 33842),
        (0, 326430, "", 108),
        (1, 326430, "", 34086),
    ]


def test_910b_uses_the_hbm_pair_and_real_power() -> None:
    info = npu_smi.parse_info(read("info_910b3_8npus_drv24.1.0_busy_vllm_tp8.txt"))
    c = info.chips[0]
    assert (c.device_id, c.memory_used_mb, c.memory_total_mb, c.power_w, c.aicore_pct) == (
        None,
        62810,
        65536,
        153.7,
        39,
    )


def test_non_contiguous_device_ids_variant() -> None:
    info = npu_smi.parse_info(read("variant_310p3_2cards_devices_0_1_4_5.txt"))
    assert [c.device_id for c in info.chips] == [0, 1, 4, 5]
    assert [c.npu_id for c in info.chips] == [64, 64, 32832, 32832]


def test_warning_chip_variant() -> None:
    info = npu_smi.parse_info(read("variant_310p3_2cards_chip3_warning_chip0_97C.txt"))
    assert [c.health for c in info.chips] == ["OK", "OK", "OK", "Warning"]
    assert info.chips[0].temp_c == 97


@pytest.mark.parametrize("keep", [3, 8, 12, 17, 20])
def test_truncated_table_is_a_clear_error(keep: int) -> None:
    lines = read("info_310p3_2cards_4chips_drv25.2.0_idle.txt").splitlines()
    with pytest.raises(npu_smi.NpuSmiError, match=r"truncated|no second row|cut off"):
        npu_smi.parse_info("\n".join(lines[:keep]) + "\n")


def test_table_cut_mid_row_names_the_line() -> None:
    text = read("info_310p3_2cards_4chips_drv25.2.0_idle.txt")
    with pytest.raises(npu_smi.NpuSmiError, match="truncated after line 14"):
        npu_smi.parse_info(text[: text.index("| 0       2 ") + 40])


@pytest.mark.parametrize("text", ["", "command not found\n", "garbage | with | pipes\n+---+\n"])
def test_foreign_text_is_a_clear_error(text: str) -> None:
    with pytest.raises(npu_smi.NpuSmiError, match="not an npu-smi info table"):
        npu_smi.parse_info(text)


def test_dcmi_8005_names_the_likely_cause() -> None:
    with pytest.raises(npu_smi.NpuSmiError, match=r"ret -8005\).*another container"):
        npu_smi.parse_info(read("error_npu-smi_in_container_dcmi_-8005.txt"))


def test_common_report_gives_per_chip_temperature_and_card_power() -> None:
    rep = npu_smi.parse_card_report(read("npu-smi_info_-t_common_-i_1_310p_gpustack_fixture.txt"))
    assert (rep.npu_id, rep.chip_count, rep.power_w, rep.mcu_temp_c) == (1, 2, 45.2, 48.0)
    assert [(c.chip_id, c.temp_c, c.memory_usage_pct, c.aicore_freq_mhz) for c in rep.chips] == [
        (0, 60.0, 3.0, 960.0),
        (1, 59.0, 3.0, 960.0),
    ]


def test_usages_report_where_chip_id_closes_each_block() -> None:
    rep = npu_smi.parse_card_report(read("npu-smi_info_-t_usages_-i_1_310p_gpustack_fixture.txt"))
    assert [(c.chip_id, c.memory_capacity_mb, c.memory_usage_pct) for c in rep.chips] == [
        (0, 44280, 3.0),
        (1, 43693, 3.0),
    ]


def test_common_report_with_tab_indented_lines() -> None:
    text = "\n".join(
        "\t" + ln if ln else ln for ln in read("npu-smi_info_-t_common_-i_1_310p_gpustack_fixture.txt").splitlines()
    )
    assert npu_smi.parse_card_report(text).chips[1].temp_c == 59.0


def test_truncated_card_report_is_an_error() -> None:
    text = read("npu-smi_info_-t_common_-i_1_310p_gpustack_fixture.txt").split("Chip ID                        : 1")[0]
    with pytest.raises(npu_smi.NpuSmiError, match="says 2 chips but lists 1"):
        npu_smi.parse_card_report(text)


def test_mapping_with_mcu_rows() -> None:
    rows = npu_smi.parse_mapping(read("npu-smi_info_-m_mapping_310p_ANONYMIZED_gpustack_fixture.txt"))
    chips = [(r.npu_id, r.chip_id, r.logic_id) for r in rows if r.logic_id is not None]
    assert chips == [(1, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 3), (4, 0, 4), (4, 1, 5), (5, 0, 6), (5, 1, 7)]
    single = npu_smi.parse_mapping(read("npu-smi_info_-m_mapping_310p3_single_chip_ait_docs.txt"))
    assert single == [npu_smi.MappingRow(4, 0, 0, "Ascend 310P3"), npu_smi.MappingRow(4, 1, None, "Mcu")]


def test_run_missing_binary_says_how_to_mount_it(tmp_path: Path) -> None:
    with pytest.raises(npu_smi.NpuSmiNotFound, match=r"not found on PATH.*-v /usr/local/bin/npu-smi"):
        npu_smi.run(["info"], binary=str(tmp_path / "npu-smi"))


def fake_binary(tmp_path: Path, body: str) -> str:
    path = tmp_path / "npu-smi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_run_reads_a_real_process(tmp_path: Path) -> None:
    binary = fake_binary(tmp_path, f"cat {FIX / 'info_310p3_1card_2chips_drv25.2.0.txt'}\n")
    assert len(npu_smi.parse_info(npu_smi.run(["info"], binary=binary)).chips) == 2


def test_run_turns_exit_codes_dcmi_errors_and_hangs_into_messages(tmp_path: Path) -> None:
    with pytest.raises(npu_smi.NpuSmiError, match="exited with 3: boom"):
        npu_smi.run(["info"], binary=fake_binary(tmp_path, "echo boom >&2; exit 3\n"))
    dcmi = FIX / "error_npu-smi_in_container_dcmi_-8005.txt"
    with pytest.raises(npu_smi.NpuSmiError, match="-8005"):
        npu_smi.run(["info"], binary=fake_binary(tmp_path, f"cat {dcmi}; exit 255\n"))
    with pytest.raises(npu_smi.NpuSmiError, match="did not answer within 1s"):
        npu_smi.run(["info"], binary=fake_binary(tmp_path, "exec sleep 30\n"), timeout_s=1)
    assert os.path.exists(tmp_path / "npu-smi")
