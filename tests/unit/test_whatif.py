"""What-if scoring: speedups, group geomeans, credit and score by hand; expansion;
errors; the scorecard files and figure of a run."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from lyra_simpy import run_scenario, scenario_from_dict
from lyra_simpy.errors import ScenarioError
from lyra_simpy.whatif import ScoreRule, WhatIf, format_scorecard, scorecard

WORKLOADS = [
    {"label": "a", "group": "seq"},
    {"label": "b", "group": "seq"},
    {"label": "c", "group": "conc"},
]


def whatif(**kw) -> WhatIf:
    base = {
        "workloads": WORKLOADS,
        "candidates": [{"label": "base"}, {"label": "x"}, {"label": "y"}],
    }
    return WhatIf.model_validate({**base, **kw})


def summaries(*durations: float) -> list[dict[str, float]]:
    return [{"duration": d, "output_throughput": 100.0 / d} for d in durations]


def test_speedups_geomeans_and_score_by_hand():
    runs = summaries(10, 20, 30, 5, 10, 30, 8, 16, 20)  # base, x, y over a, b, c
    card = scorecard(whatif(), runs)
    assert card.speedups["x"] == {"a": 2.0, "b": 2.0, "c": 1.0}
    assert card.speedups["y"] == pytest.approx({"a": 1.25, "b": 1.25, "c": 1.5})
    assert card.geomeans["y"] == pytest.approx({"seq": 1.25, "conc": 1.5})
    # x: full credit on seq, none on conc -> the weaker group gives the score
    assert card.scores["x"] == pytest.approx(0.30)
    # y: credits (1.25 - 1.02) / 0.98 and (1.5 - 1.02) / 0.98; the weaker counts
    assert card.scores["y"] == pytest.approx(0.30 + 0.70 * (0.23 / 0.98))
    assert card.scores["base"] == pytest.approx(0.30)
    table = format_scorecard(card)
    assert "geo_seq" in table
    assert "2.000x" in table


def test_geomean_of_unequal_speedups_and_credit_clipping():
    runs = summaries(10, 10, 10, 5, 20, 1)  # base, x: speedups 2, 0.5 and 10
    card = scorecard(whatif(candidates=[{"label": "base"}, {"label": "x"}]), runs)
    assert card.geomeans["x"]["seq"] == pytest.approx(1.0)  # sqrt(2 x 0.5)
    rule = ScoreRule()
    assert rule.credit(10.0) == 1.0
    assert rule.credit(0.5) == 0.0
    assert rule.credit(1.51) == pytest.approx(0.5)


def test_higher_is_better_metric_and_another_baseline():
    runs = summaries(10, 20, 30, 5, 10, 30, 8, 16, 20)
    card = scorecard(whatif(metric="output_throughput", baseline="x"), runs)
    # throughput 100 / duration: x's throughput over itself is 1, base's is half
    assert card.speedups["x"] == {"a": 1.0, "b": 1.0, "c": 1.0}
    assert card.speedups["base"] == pytest.approx({"a": 0.5, "b": 0.5, "c": 1.0})


def test_custom_score_rule():
    runs = summaries(10, 10, 10, 5, 5, 5)
    w = whatif(
        candidates=[{"label": "base"}, {"label": "x"}],
        score={"floor_speedup": 1.0, "full_speedup": 3.0, "base": 0.0, "weight": 1.0},
    )
    assert scorecard(w, runs).scores["x"] == pytest.approx(0.5)


def test_wrong_number_of_runs_is_an_error():
    with pytest.raises(ValueError, match="got 2 runs, must be one per candidate and workload"):
        scorecard(whatif(), summaries(1, 2))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"candidates": [{"label": "a"}, {"label": "a"}]}, "candidates[1].label: got 'a', must"),
        ({"workloads": [{"label": "a.b", "group": "g"}]}, "workloads[0].label: got 'a.b', must"),
        ({"baseline": "zz"}, "baseline: got 'zz', must be one of ['base']"),
        (
            {"score": {"floor_speedup": 2, "full_speedup": 2}},
            "whatif.score: full_speedup: got 2.0, must be > floor_speedup (2.0)",
        ),
        ({"metric": "p50_ttft"}, "whatif.metric: got 'p50_ttft', must be 'duration'"),
        ({"candidates": []}, "whatif.candidates: got []"),
    ],
)
def test_bad_whatif_blocks_are_one_line_errors(tiny_raw, change, message):
    raw = {
        **tiny_raw,
        "whatif": {"workloads": WORKLOADS, "candidates": [{"label": "base"}], **change},
    }
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(raw)
    assert "\n" not in str(info.value)
    assert message in str(info.value)


def test_whatif_with_a_grid_is_refused(tiny_raw):
    tiny_raw["grid"] = {"path": "seed", "values": [1]}
    tiny_raw["whatif"] = {"workloads": WORKLOADS, "candidates": [{"label": "base"}]}
    with pytest.raises(ScenarioError, match="use one of variants, grid and whatif, not grid and"):
        scenario_from_dict(tiny_raw)


def test_expansion_is_candidate_major_and_candidates_apply_last(tiny_raw):
    tiny_raw["whatif"] = {
        "workloads": [
            {"label": "few", "group": "g", "set": {"workload.num_requests": 3}},
            {"label": "many", "group": "g", "set": {"scheduler.max_num_seqs": 2}},
        ],
        "candidates": [
            {"label": "base"},
            {"label": "wide", "set": {"scheduler.max_num_seqs": 8}},
        ],
    }
    runs = scenario_from_dict(tiny_raw).expand()
    assert [r.label for r in runs] == ["base.few", "base.many", "wide.few", "wide.many"]
    assert [r.workload.num_requests for r in runs] == [3, 12, 3, 12]
    assert [r.scheduler.max_batch for r in runs] == [4, 2, 8, 8]


def test_a_run_writes_the_scorecard_and_its_figure(tiny_raw, tmp_path):
    # one request at a time: a twice as expensive engine takes exactly twice as long
    tiny_raw["workload"]["arrival"] = {"name": "closed_loop", "concurrency": 1}
    tiny_raw["whatif"] = {
        "workloads": [
            {"label": "one", "group": "sequential"},
            {"label": "two", "group": "concurrent", "set": {"workload.arrival.concurrency": 2}},
        ],
        "candidates": [
            {"label": "base"},
            {"label": "slow", "set": {"cost": {"name": "linear", "base_ms": 20, "per_seq_ms": 2}}},
        ],
    }
    tiny_raw["figures"] = [{"name": "whatif"}]
    lines: list[str] = []
    sc = scenario_from_dict(tiny_raw)
    run_scenario(sc, tmp_path / "res", tmp_path / "fig", echo=lines.append)
    folder = tmp_path / "res" / "tiny"
    doc = json.loads((folder / "whatif.json").read_text())
    assert doc["baseline"] == "base"
    assert doc["geomeans"]["slow"]["sequential"] == pytest.approx(0.5, rel=1e-9)
    assert doc["scores"] == {"base": pytest.approx(0.3), "slow": pytest.approx(0.3)}
    rows = (folder / "whatif.csv").read_text().splitlines()
    assert rows[0] == "candidate,workload,group,duration,speedup"
    assert len(rows) == 5
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [
        "base.one", "base.two", "slow.one", "slow.two",
    ]  # fmt: skip
    assert (tmp_path / "fig" / "tiny_speedups.png").stat().st_size > 0
    assert any(line.startswith("speedup over base (duration)") for line in lines)
    assert not math.isnan(doc["geomeans"]["slow"]["concurrent"])


def test_model_errors_name_the_field():
    with pytest.raises(ValidationError, match="full_speedup"):
        ScoreRule(floor_speedup=3.0, full_speedup=2.0)
