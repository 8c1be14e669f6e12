"""validation/llamacpp_floor.py: the target scored with a real run as the prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import validation_module

floor = validation_module("llamacpp_floor")


def test_every_triple_scores_the_runs_left_and_the_simulation() -> None:
    # runs 100, 102, 98, 130 of a p90: the first three's spread is 2 %, so the fourth run
    # (30 % off) misses against them; any triple holding 130 spreads ~27 % and takes all
    got = floor.floor([100.0, 102.0, 98.0, 130.0], 101.0, "p90_ttft_ms")
    assert got == {
        "one run": [False, True, True, True],
        "median of the rest": [False, True, True, True],
        "table 1": [True, True, True, True],
    }
    # a p50 has 10 % whatever the spread; the throughput 5 %
    assert (
        floor.floor([100.0, 100.0, 100.0, 109.0], 91.0, "median_ttft_ms")["one run"] == [True] * 4
    )
    assert floor.floor([100.0, 100.0, 100.0, 106.0], 100.0, "output_throughput")["one run"] == [
        False, True, True, True
    ]  # fmt: skip


def _point(tmp_path: Path, runs: int) -> Path:
    metrics = validation_module("llamacpp_points").METRICS
    for load in validation_module("llamacpp_points").LOADS:
        for k in range(1, runs + 1):  # the fourth kept apart, as the matrix reads three
            run = tmp_path / ("real" if k <= 3 else "floor") / load / f"run{k}"
            run.mkdir(parents=True)
            # run 4 is 20 % slower in every latency than runs 1-3 (which agree)
            slow = 1.2 if k == 4 else 1.0
            values = {m: 100.0 * (1.0 if m == "output_throughput" else slow) for m in metrics}
            (run / "summary.json").write_text(json.dumps(values))
        (tmp_path / "sim" / load / "base").mkdir(parents=True)
        (tmp_path / "sim" / load / "base" / "summary.json").write_text(
            json.dumps(dict.fromkeys(metrics, 100.0))
        )
    return tmp_path


def test_a_point_with_four_runs(tmp_path: Path) -> None:
    got = floor.point_floor(_point(tmp_path, 4))
    assert set(got["repeats"].values()) == {4}
    inside = got["inside"]
    # against runs 1-3 (spread 0) run 4, 20 % off, misses every latency cell, p50s too
    # (beyond 10 %); the three triples holding run 4 spread 20 % and take the run left
    assert inside["one run"] == {"throughput": 1.0, "p50": 0.75, "p90": 0.75}
    assert inside["table 1"] == {"throughput": 1.0, "p50": 1.0, "p90": 1.0}
    # four triples a load, five loads: one run left each; three p50s and p90s a load
    assert got["cells"]["one run"] == {"throughput": 20, "p50": 60, "p90": 60}


def test_three_runs_are_too_few(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="3 runs; the floor needs 4"):
        floor.point_floor(_point(tmp_path, 3))


def test_the_gaussian_floors() -> None:
    # one run against three lands within the farthest of them from their median ~63 % of
    # the time; their exact mean ~85 %
    assert floor.normal_floor() == {"one run": 0.635, "exact mean": 0.847}


def test_item_52s_floor_at_np4_short() -> None:
    # item 52: -np 4 short with six real runs a load. Against every three of them, a fourth
    # real run holds the p90 rule 63 % of the time, the median of the other three 72 %, and
    # Table 1 (from probes, its steps 0.98-1.00 x the charge there) 69 %
    kept = Path(__file__).resolve().parents[2] / "docs" / "validation"
    got = json.loads((kept / "llamacpp-floor-item52.json").read_text())
    assert set(got["repeats"].values()) == {6}
    assert got["inside"] == {
        "one run": {"throughput": 1.0, "p50": 0.978, "p90": 0.629},
        "median of the rest": {"throughput": 1.0, "p50": 1.0, "p90": 0.723},
        "table 1": {"throughput": 1.0, "p50": 0.987, "p90": 0.687},
    }
    assert got["cells"]["table 1"]["p90"] == 300  # 20 triples x 5 loads x 3 p90s
    assert got["normal"] == floor.normal_floor()


def test_item_54s_table_1_against_the_same_six_runs() -> None:
    # item 54: each decode pass priced at its own rows; the same runs, Table 1 again
    kept = Path(__file__).resolve().parents[2] / "docs" / "validation"
    got = json.loads((kept / "llamacpp-floor-item54.json").read_text())
    before = json.loads((kept / "llamacpp-floor-item52.json").read_text())
    assert got["inside"]["table 1"] == {"throughput": 1.0, "p50": 0.977, "p90": 0.723}
    for real in ("one run", "median of the rest"):  # the real runs' own: unchanged
        assert got["inside"][real] == before["inside"][real]
