"""validation/llamacpp_np_ab.py: two-sequence decode at ``-np 2`` and ``-np 4`` on the same
minutes, and the figures docs/VALIDATION-llamacpp.md item 15 and the README quote from its
stored runs (issue 12)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from builders import validation_module

np_ab = validation_module("llamacpp_np_ab")
ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "docs" / "validation"


def _run(r: int, arm: str, step: float, before: float = 17.0, after: float = 17.0) -> dict:
    return {"round": r, "arm": arm, "step_ms": step, "lone_before_ms": before,
            "lone_after_ms": after}  # fmt: skip


def test_each_arm_is_its_median_over_np4s() -> None:
    found = [_run(1, "np2", 33.0), _run(1, "np4", 30.0, 16.0, 18.0),
             _run(2, "np2", 36.0), _run(2, "np4", 32.0), _run(3, "np2", 30.0),
             _run(3, "np4", 31.0)]  # fmt: skip
    rows = {r[0]: r for r in np_ab.table(found, ["np2", "np4"])}
    assert rows["np2"][1:4] == ([33.0, 36.0, 30.0], 33.0, pytest.approx(33.0 / 31.0))
    assert rows["np4"][3] == 1.0
    assert rows["np4"][5].startswith("16.0->18.0, ")
    assert rows["np4"][4] is None  # no server timings in these runs
    # without an np4 arm there is nothing to divide by
    assert np_ab.table(found[:1], ["np2"])[0][3] is None


def test_two_over_one_pairs_each_context() -> None:
    rows = [{"round": 1, "arm": "np4", "b1_c208": 16.0, "b1_c408": 17.0, "b2_c208": 32.0,
             "b2_c408": 37.4}]  # fmt: skip
    assert np_ab.two_over_one(rows) == {"np4": [2.0, 2.2]}


def test_minus_np_2_decodes_two_sequences_as_minus_np_4_does() -> None:
    # item 15: same minutes, rotating order; within 4 % of -np 4, a queue changes nothing
    runs = json.loads((STORED / "llamacpp-np-ab-epyc.json").read_text())["runs"]
    assert len(runs) == 12
    rows = {r[0]: r for r in np_ab.table(runs, list(np_ab.ARMS))}
    assert {k: round(r[2], 2) for k, r in rows.items()} == {
        "np2_b64": 33.44, "np2_b64_q2": 32.48, "np2": 32.72, "np4": 32.23}  # fmt: skip
    assert all(1.0 <= r[3] < 1.04 for r in rows.values())
    # the lone request after each arm: 0.88-1.11 x before, no arm slower after
    ratios = [g["lone_after_ms"] / g["lone_before_ms"] for g in runs]
    assert min(ratios) > 0.87
    assert max(ratios) < 1.12
    assert (round(min(ratios), 2), round(max(ratios), 2)) == (0.88, 1.11)
    # with -b 64 the server's own per-token time averages in the chunked prompts
    b64 = [g["server_per_token_ms"] for g in runs if g["arm"].startswith("np2_b64")]
    other = [g["server_per_token_ms"] for g in runs if not g["arm"].startswith("np2_b64")]
    assert min(b64) > max(other)
    assert {k: r[4] for k, r in rows.items()} == {
        "np2_b64": 38.33, "np2_b64_q2": 38.37, "np2": 33.29, "np4": 32.3}  # fmt: skip


def test_the_profiles_two_sequence_probes_move_with_the_host() -> None:
    rows = json.loads((STORED / "llamacpp-np-ab-probes-epyc.json").read_text())["probes"]
    ratios = np_ab.two_over_one(rows)
    assert set(ratios) == {"np2_b64", "np4"}
    every = [x for v in ratios.values() for x in v]
    assert (min(every), max(every)) == (1.92, 2.75)


def _profiles(text: str) -> dict[str, tuple[float, float]]:
    """``llamacpp_steps.py --by-batch``'s output: each point's profile row, (one
    sequence, two sequences) in ms."""
    found = re.findall(r"^(\w+): decode-only.*\n  profile\s+b1/p1 ([\d.]+); b2/p1 ([\d.]+)",
                       text, re.M)  # fmt: skip
    return {name: (float(b1), float(b2)) for name, b1, b2 in found}


def test_the_np2_b64_long_profile_is_the_outlier() -> None:
    # item 15: two over one sequence in each of item 14's profiles (llamacpp_steps.py
    # --by-batch): 1.67 at -np 2 -b 64 long, 1.74 at -kvu long, 1.87-1.94 at the other
    # four; its two-sequence rows 10-16 % quicker than the other long profiles'
    prof = _profiles((STORED / "llamacpp-by-batch-epyc.txt").read_text())
    ratio = {name: b2 / b1 for name, (b1, b2) in prof.items()}
    assert len(ratio) == 6
    assert round(ratio.pop("np2_b64_long"), 2) == 1.67
    assert min(ratio.values()) > 1.73
    assert round(ratio.pop("kvu_long"), 2) == 1.74
    assert (round(min(ratio.values()), 2), round(max(ratio.values()), 2)) == (1.87, 1.94)
    quicker = [1 - prof["np2_b64_long"][1] / prof[p][1] for p in ("default_long", "kvu_long")]
    assert (round(min(quicker), 2), round(max(quicker), 2)) == (0.10, 0.16)


def test_item_16s_profile_runs_two_sequences_at_the_usual_speed() -> None:
    # item 16: -np 2 -b 64 long run again: its profile two over one 1.91, and its loads'
    # two-sequence steps 30.6-33.7 ms against the profile's 32.9
    text = (STORED / "llamacpp-by-batch-np2-b64-long-item16.txt").read_text()
    b1, b2 = _profiles(text)["np2_b64_long"]
    assert (b2, round(b2 / b1, 2)) == (32.9, 1.91)
    loads = [float(x) for x in re.findall(r"b2/p1 ([\d.]+) \(", text)]
    assert (len(loads), min(loads), max(loads)) == (5, 30.6, 33.7)


def test_item_17s_run_of_np2_b64_short_decodes_at_its_profiles_speed() -> None:
    # item 17: -np 2 -b 64 short run again, every run inside the gate: two sequences
    # 31.5-32.5 ms at every load against the profile's 31.3, one sequence 16.8-19.3
    # against 17.2 (item 14's Poisson 0.3 and 0.9: 17.9 and 18.1 against 16.0)
    text = (STORED / "llamacpp-by-batch-np2-b64-short-item17.txt").read_text()
    assert _profiles(text)["np2_b64_short"] == (17.2, 31.3)
    two = [float(x) for x in re.findall(r"b2/p1 ([\d.]+) \(", text)]
    one = [float(x) for x in re.findall(r"b1/p1 ([\d.]+) \(", text)]
    assert (len(two), min(two), max(two)) == (5, 31.5, 32.5)
    assert (len(one), min(one), max(one)) == (5, 16.8, 19.3)
    before = (STORED / "llamacpp-by-batch-epyc.txt").read_text()
    old = before[before.index("np2_b64_short:") :]
    assert _profiles(old)["np2_b64_short"][0] == 16.0
    assert re.findall(r"poisson_0\.[39]\s+b1/p1 ([\d.]+)", old)[:2] == ["17.9", "18.1"]


def _four_sequences(text: str, point: str) -> tuple[float, float, list[float]]:
    """*point*'s block of ``llamacpp_steps.py --by-batch``'s output: the profile's one- and
    four-sequence rows and each load's four-sequence step, ms."""
    lines = text[text.index(f"{point}: decode-only") :].splitlines()[1:]
    block = list(itertools.takewhile(lambda line: line.startswith("  "), lines))
    b1, b4 = (re.search(rf"b{n}/p1 ([\d.]+)", block[0]) for n in (1, 4))
    assert b1 is not None
    assert b4 is not None
    runs = [float(m[1]) for line in block[1:] if (m := re.search(r"b4/p1 ([\d.]+) \(", line))]
    return float(b1[1]), float(b4[1]), runs


def test_item_19s_profile_caught_four_sequences_quick() -> None:
    # item 19: -np 4 short's fresh profile, four sequences 40.3 ms (the one before: 44.3),
    # one sequence 18.6 (17.3); its runs' four-sequence steps 40.9-45.9 ms
    text = (STORED / "llamacpp-by-batch-default-short-item19.txt").read_text()
    b1, b4, runs = _four_sequences(text, "default_short")
    assert (b1, b4) == (18.6, 40.3)
    assert (min(runs), max(runs)) == (40.9, 45.9)
    old = (STORED / "llamacpp-by-batch-epyc.txt").read_text()
    assert _four_sequences(old, "default_short")[:2] == (17.3, 44.3)


def test_item_20s_kept_profile_matches_its_runs_at_four_sequences() -> None:
    # item 20: the profile the full-batch check kept, four sequences 38.4 ms; its runs'
    # four-sequence steps 38.3-40.8 ms (item 19: 40.3 against 40.9-45.9)
    text = (STORED / "llamacpp-by-batch-default-short-item20.txt").read_text()
    b1, b4, runs = _four_sequences(text, "default_short")
    assert (b1, b4) == (17.1, 38.4)
    assert (min(runs), max(runs)) == (38.3, 40.8)


def test_item_21s_kept_profiles_against_their_runs_at_four_sequences() -> None:
    # item 21: the profiles the check kept against their runs' four-sequence steps
    # (`llamacpp_steps.py --by-batch default_long kvu_short kvu_long`, stored)
    text = (STORED / "llamacpp-by-batch-item21.txt").read_text()
    for point, profile, lo, hi in (("default_long", 40.5, 41.7, 43.3),
                                   ("kvu_short", 40.0, 38.3, 40.4),
                                   ("kvu_long", 42.2, 42.8, 45.3)):  # fmt: skip
        _, b4, runs = _four_sequences(text, point)
        assert len(runs) == 5  # one a load
        assert b4 == profile
        assert (min(runs), max(runs)) == (lo, hi)


def test_the_arms_are_the_matrixs_launch_lines() -> None:
    # -np 2 -b 64 as the matrix launches it, the same without -b, -np 4 the default point
    assert np_ab.ARMS["np2_b64"][0][-2:] == ["-b", "64"]
    assert "-b" not in np_ab.ARMS["np2"][0]
    assert np_ab.ARMS["np4"][0][:2] == ["-np", "4"]
    assert [np_ab.ARMS[a][1] for a in np_ab.ARMS] == [2, 4, 2, 2]
