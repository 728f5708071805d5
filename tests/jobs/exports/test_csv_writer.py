"""The CSV tags cell: every tag read back whole, and no piece a spreadsheet splits at ``;`` starts a formula."""

from __future__ import annotations

import pytest

from jobs.exports.csv_writer import tags_cell, tags_of_cell

FORMULA = ("=", "+", "-", "@", "\t", "\r")

CASES = [
    ["sea", "boat"],
    ["=1+1", "+cmd", "-2", "@SUM(A1)", "\tx", "\rx"],
    ["rock;roll", ";", ";;", "a;=b", "a;'b", "x;"],
    ["back\\slash", "\\", "\\;", "ends\\", "'quoted", "''", "'=x"],
    ["", "plain"],
]


@pytest.mark.parametrize("names", CASES)
def test_tags_read_back_exactly(names: list[str]) -> None:
    assert tags_of_cell(tags_cell(names)) == names


@pytest.mark.parametrize("names", CASES)
def test_no_piece_split_at_the_separator_is_a_formula(names: list[str]) -> None:
    pieces = tags_cell(names).split(";")
    assert not [p for p in pieces if p.startswith(FORMULA)], pieces


def test_plain_tags_are_written_as_before() -> None:
    assert tags_cell(["sea", "sunset", "holiday"]) == "sea;sunset;holiday"
    assert tags_of_cell("") == []
