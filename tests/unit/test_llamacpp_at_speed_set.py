"""validation/llamacpp_at_speed_set.py: a kept set's noise bands merged with new points'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import validation_module

SET = validation_module("llamacpp_at_speed_set")
ROOT = Path(__file__).resolve().parents[2]


def test_new_points_lines_replace_theirs_and_the_all_line_is_summed_again() -> None:
    head = "cells in target of 7 a load: ..."
    earlier = [
        head,
        "a/short         T1 20 -> 21 (band 19) of 35   T3 30 -> 29 (band 25) of 35",
        "b/long          T1 30 -> 30 (band 28) of 35   T3 31 -> 31 (band 30) of 35",
        "all            T1 50 -> 51 (band 47) of 70   T3 61 -> 60 (band 55) of 70",
        "the bands' width over the real value, median over the cells: T1 6.5%",
    ]
    new = [head, "b/long          T1 22 -> 24 (band 31) of 35   T3 26 -> 19 (band 31) of 35",
           "all            T1 22 -> 24 (band 31) of 35   T3 26 -> 19 (band 31) of 35"]  # fmt: skip
    assert SET.merged_bands(earlier, new) == [
        head,
        earlier[1],
        new[1],
        "all            T1 42 -> 45 (band 50) of 70   T3 56 -> 48 (band 56) of 70",
    ]
    with pytest.raises(SystemExit, match=r"^--keep: the earlier set has no line for c/long$"):
        SET.merged_bands(earlier, [head, new[1].replace("b/long", "c/long")])


def test_item_68s_kept_bands_are_item_67s_merged_with_the_two_points_run_again() -> None:
    validation = ROOT / "docs" / "validation"
    new = json.loads((validation / "llamacpp-at-speed-item68.json").read_text())["noise_printed"]
    old = json.loads((validation / "llamacpp-at-speed-item67.json").read_text())["noise_printed"]
    for flags in SET.BANDS:
        assert new["by_flags"][flags] == SET.merged_bands(
            old["by_flags"][flags], new["new_points_printed"][flags]
        )
