"""The device model: every figure sourced, the 300I Duo per-chip figures consistent with the card's data sheet and
with what npu-smi reports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from engine.devices import FigureKind, cards, chips, get_card
from engine.platforms import get_platform

NPU_SMI = Path(__file__).parent / "fixtures" / "npu_smi"
# Stored figures: "measured" ones are measured on the planning host (the cpu-host card), never read from the file.
KINDS = set(get_args(FigureKind)) - {"measured"}


def test_every_figure_has_a_kind_and_a_source() -> None:
    for chip in chips().values():
        for name, fig in chip.figures().items():
            assert fig.kind in KINDS, (chip.key, name)
            assert len(fig.source) > 10, (chip.key, name)
            assert fig.value > 0, (chip.key, name)
    for card in cards().values():
        assert card.power_w.kind in KINDS and card.power_w.source


def test_300i_duo_chip_is_half_the_card_data_sheet() -> None:
    duo = get_card("atlas-300i-duo")
    chip = duo.chip
    assert duo.chips_per_card == 2
    assert duo.power_w.value == 150 and duo.power_w.kind == "datasheet"
    assert "passive" in duo.cooling
    # Data sheet per card: 96 GB LPDDR4X, 408 GB/s, 140 TFLOPS FP16, 280 TOPS INT8.
    assert chip.memory_gb.value * duo.chips_per_card == 96
    assert chip.bandwidth_gbs.value * duo.chips_per_card == pytest.approx(408, abs=1)
    assert chip.fp16_tflops.value * duo.chips_per_card == 140
    assert chip.int8_tops.value * duo.chips_per_card == 280
    assert chip.bandwidth_gbs.kind == "derived"


def test_310p3_visible_memory_is_the_smaller_npu_smi_total() -> None:
    text = (NPU_SMI / "info_310p3_1card_2chips_drv25.2.0.txt").read_text()
    totals = [int(m) for m in re.findall(r"\d+ / (\d+)\s", text) if int(m) > 1000]
    assert sorted(set(totals)) == [43693, 44280]
    chip = get_card("atlas-300i-duo").chip
    assert chip.memory_visible_mib.value == min(totals)
    assert chip.memory_bytes == 43693 * 1024**2
    # About 43 GiB usable of the 48 GB sold.
    assert 42 < chip.memory_bytes / 1024**3 < 44


def test_310p_has_no_bf16_and_no_w4a8() -> None:
    chip = get_card("atlas-300i-duo").chip
    assert chip.bf16 is False
    assert "w4a8" not in chip.quantizations and "w8a8" in chip.quantizations
    assert get_platform(chip.platform).device_control_env_var == "ASCEND_RT_VISIBLE_DEVICES"
    assert get_card("atlas-800t-a2").chip.bf16 is True


def test_comparison_devices_present() -> None:
    keys = set(cards())
    assert {"atlas-300i-duo", "atlas-800t-a2", "atlas-300i-a2"} <= keys
    nvidia = [c for c in cards().values() if c.chip.vendor == "nvidia"]
    assert nvidia and all(
        get_platform(c.chip.platform).device_control_env_var == "CUDA_VISIBLE_DEVICES" for c in nvidia
    )
    # Decode is bandwidth bound: an A100 reads weights ~9.5x faster than one 310P3 chip.
    ratio = (
        get_card("nvidia-a100-80g-pcie").chip.bandwidth_gbs.value / get_card("atlas-300i-duo").chip.bandwidth_gbs.value
    )
    assert 9 < ratio < 10


def test_every_card_belongs_to_a_registered_platform() -> None:
    for key, card in cards().items():
        assert key in get_platform(card.chip.platform).cards(), key


def test_unknown_card_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="atlas-300i-duo"):
        get_card("atlas-9000")
