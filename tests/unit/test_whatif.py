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
        "aba": False,
    }
    return WhatIf.model_validate({**base, **kw})


def summaries(*durations: float) -> list[dict[str, float]]:
    return [{"duration": d, "output_throughput": 100.0 / d} for d in durations]


def two(*durations: float) -> dict[str, float]:
    """Scores of a base (durations 10, 10, 10 over a, b, c) and one candidate x."""
    runs = summaries(10, 10, 10, *durations)
    return scorecard(whatif(candidates=[{"label": "base"}, {"label": "x"}]), runs).scores


def test_speedups_geomeans_and_score_by_hand():
    runs = summaries(10, 20, 30, 5, 10, 30, 8, 16, 20)  # base, x, y over a, b, c
    card = scorecard(whatif(), runs)
    assert card.speedups["x"] == {"a": 2.0, "b": 2.0, "c": 1.0}
    assert card.speedups["y"] == pytest.approx({"a": 1.25, "b": 1.25, "c": 1.5})
    assert card.geomeans["y"] == pytest.approx({"seq": 1.25, "conc": 1.5})
    # x: credits 1 (seq) and 0 (conc): mean 0.5, cap 0.30 + 0.70 x 0 -> 0.30
    assert card.credits["x"] == {"seq": 1.0, "conc": 0.0}
    assert card.scores["x"] == pytest.approx(0.30)
    # y: credits 0.23 / 0.98 and 0.48 / 0.98: the mean (0.3622) is under the cap (0.4643)
    assert card.scores["y"] == pytest.approx((0.23 / 0.98 + 0.48 / 0.98) / 2)
    assert card.scores["base"] == 0.0
    assert card.gates == {"base": None, "x": None, "y": None}
    table = format_scorecard(card)
    assert "geo_seq" in table
    assert "2.000x" in table


def test_parity_scores_exactly_zero():
    card = scorecard(whatif(), summaries(*[7.0] * 9))
    assert card.scores == {"base": 0.0, "x": 0.0, "y": 0.0}
    assert two(10, 10, 10) == {"base": 0.0, "x": 0.0}
    # up to the live-zero anchor 1.02x, still nothing
    assert two(10 / 1.02, 10 / 1.02, 10 / 1.02)["x"] == pytest.approx(0.0, abs=1e-12)


def test_twice_as_fast_on_both_classes_scores_one():
    # credits 1 and 1: mean 1, cap 0.30 + 0.70 x 1 = 1
    assert two(5, 5, 5)["x"] == 1.0
    assert two(1, 1, 1)["x"] == 1.0  # 10x: credit capped at 1


def test_the_mean_or_the_cap_whichever_is_lower():
    # credits seq 1 (2x), conc 0.5 (1.51x): mean 0.75 > cap 0.30 + 0.70 x 0.5 = 0.65
    assert two(5, 5, 10 / 1.51)["x"] == pytest.approx(0.65)
    # credits seq 0.5 (1.51x), conc 0.25 (1.265x): mean 0.375 < cap 0.475
    assert two(10 / 1.51, 10 / 1.51, 10 / 1.265)["x"] == pytest.approx(0.375)
    # the other reading, the strongest credit capped: min(1, 0.65) and min(0.5, 0.475)
    rule = {"uncapped": "max"}
    cands = [{"label": "base"}, {"label": "x"}]
    runs = summaries(10, 10, 10, 5, 5, 10 / 1.51)
    assert scorecard(whatif(candidates=cands, score=rule), runs).scores["x"] == pytest.approx(0.65)
    runs = summaries(10, 10, 10, 10 / 1.51, 10 / 1.51, 10 / 1.265)
    card = scorecard(whatif(candidates=cands, score=rule), runs)
    assert card.scores["x"] == pytest.approx(0.475)


def test_a_class_regression_scores_zero():
    # seq geomean 1/1.03 = 0.971x < 1/1.02: zero, though conc is 2x (would be 0.30)
    runs = summaries(10, 10, 10, 10.3, 10.3, 5)
    card = scorecard(whatif(candidates=[{"label": "base"}, {"label": "x"}]), runs)
    assert card.scores["x"] == 0.0
    assert card.gates["x"] == "class seq 0.971x < 1/1.02"
    # 1.01x slower is inside the gate: credits 0 and 1 -> min(0.5, 0.30)
    assert two(10.1, 10.1, 5)["x"] == pytest.approx(0.30)


def test_one_workload_beyond_the_noise_band_scores_zero():
    # a 2x, b 1/1.06 (6 % slower than the 5 % band): seq geomean 1.37x, conc 2x
    runs = summaries(10, 10, 10, 5, 10.6, 5)
    card = scorecard(whatif(candidates=[{"label": "base"}, {"label": "x"}]), runs)
    assert card.geomeans["x"]["seq"] == pytest.approx(math.sqrt(2 / 1.06))
    assert card.scores["x"] == 0.0
    assert card.gates["x"] == "workload b 0.943x < 1/(1+0.05)"
    # 4 % slower is inside the band: seq credit (sqrt(2 / 1.04) - 1.02) / 0.98
    seq = (math.sqrt(2 / 1.04) - 1.02) / 0.98
    assert two(5, 10.4, 5)["x"] == pytest.approx(min((seq + 1) / 2, 0.30 + 0.70 * seq))
    # the band is a field
    runs = summaries(10, 10, 10, 5, 10.4, 5)
    w = whatif(candidates=[{"label": "base"}, {"label": "x"}], score={"noise_band": 0.03})
    assert scorecard(w, runs).scores["x"] == 0.0


def test_aba_pools_the_baseline_sessions_into_their_median():
    w = whatif(candidates=[{"label": "base"}, {"label": "x"}], aba=True)
    # base (first session), x, base_after (second session), over a, b, c
    runs = summaries(10, 10, 20, 5.5, 5.5, 11, 12, 12, 24)
    card = scorecard(w, runs)
    assert card.sessions == {"a": [10.0, 12.0], "b": [10.0, 12.0], "c": [20.0, 24.0]}
    assert card.values["base"] == {"a": 11.0, "b": 11.0, "c": 22.0}
    assert card.speedups["x"] == {"a": 2.0, "b": 2.0, "c": 2.0}
    assert card.speedups["base"] == {"a": 1.0, "b": 1.0, "c": 1.0}
    assert card.scores == {"base": 0.0, "x": 1.0}
    assert [v.label for v in w.variants()][-3:] == ["base_after.a", "base_after.b", "base_after.c"]


def test_aba_sessions_are_distinct_noise_streams():
    w = whatif(candidates=[{"label": "base"}, {"label": "x"}], aba=True)
    sessions = [v.set.get("cost.jitter.session") for v in w.variants(noisy=True)]
    assert sessions == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert all("cost.jitter.session" not in v.set for v in w.variants())


def test_geomean_of_unequal_speedups_and_credit_clipping():
    runs = summaries(10, 10, 10, 5, 20, 1)  # base, x: speedups 2, 0.5 and 10
    card = scorecard(whatif(candidates=[{"label": "base"}, {"label": "x"}]), runs)
    assert card.geomeans["x"]["seq"] == pytest.approx(1.0)  # sqrt(2 x 0.5)
    assert card.scores["x"] == 0.0  # b is 2x slower: gated
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
    with pytest.raises(ValueError, match=r"\(4 x 3\)"):
        scorecard(whatif(aba=True), summaries(1, 2))


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
        (
            {"candidates": [{"label": "base"}, {"label": "base_after"}]},
            "candidates: got 'base_after', the label of the second baseline session",
        ),
        ({"score": {"uncapped": "min"}}, "whatif.score.uncapped: got 'min', must be 'mean'"),
        ({"score": {"noise_band": -0.1}}, "whatif.score.noise_band: got -0.1"),
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
    assert [r.label for r in runs] == [
        "base.few", "base.many", "wide.few", "wide.many", "base_after.few", "base_after.many",
    ]  # fmt: skip
    assert [r.workload.num_requests for r in runs] == [3, 12, 3, 12, 3, 12]
    assert [r.scheduler.max_batch for r in runs] == [4, 2, 8, 8, 4, 2]
    assert all(r.cost.jitter is None for r in runs)  # no noise: no sessions set
    tiny_raw["cost"]["jitter"] = {"cv": 0.02}
    runs = scenario_from_dict(tiny_raw).expand()
    assert [r.cost.jitter.session for r in runs] == [0, 0, 1, 1, 2, 2]
    assert {r.cost.jitter.cv for r in runs} == {0.02}


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
    assert doc["scores"] == {"base": 0.0, "slow": 0.0}
    assert doc["gates"]["slow"] == "class sequential 0.500x < 1/1.02"
    assert doc["baseline_sessions"]["one"][0] == doc["baseline_sessions"]["one"][1]  # no noise
    rows = (folder / "whatif.csv").read_text().splitlines()
    assert rows[0] == "candidate,workload,group,duration,speedup"
    assert len(rows) == 5
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [
        "base.one", "base.two", "base_after.one", "base_after.two", "slow.one", "slow.two",
    ]  # fmt: skip
    assert (tmp_path / "fig" / "tiny_speedups.png").stat().st_size > 0
    assert any(line.startswith("speedup over base (duration)") for line in lines)
    assert not math.isnan(doc["geomeans"]["slow"]["concurrent"])


def test_model_errors_name_the_field():
    with pytest.raises(ValidationError, match="full_speedup"):
        ScoreRule(floor_speedup=3.0, full_speedup=2.0)
