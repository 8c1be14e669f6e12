"""Capacity search against answers computed by hand.

A D/D/1 queue: constant arrivals at rate λ, one sequence at a time (``max_num_seqs: 1``),
10 output tokens, every iteration 10 ms (linear cost, base only). A request takes
S = 10 iterations = 100 ms and its first token comes after one, c = 10 ms. Below
λ = 1/S = 10 req/s nobody waits; above, request k (from 0) starts at k·S, so its TTFT is
k (S − 1/λ) + c. With N requests and TTFT SLO T, request k is good iff k ≤ (T − c) /
(S − 1/λ), so attainment ≥ a iff request ⌈aN⌉ − 1 is good:
λ* = 1 / (S − (T − c) / (⌈aN⌉ − 1)).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from lyra_simpy import ScenarioError, scenario_from_dict
from lyra_simpy.capacity import find_capacity
from lyra_simpy.cli import main
from lyra_simpy.output.capacity_report import format_capacity, parse_slo, write_capacity

S_S, C_S, T_MS, N = 0.100, 0.010, 300.0, 100

DD1: dict[str, Any] = {
    "name": "dd1",
    "seed": 1,
    "workload": {
        "num_requests": N,
        "arrival": {"name": "constant", "rate_per_s": 5.0},
        "input_tokens": {"name": "fixed", "tokens": 16},
        "output_tokens": {"name": "fixed", "tokens": 10},
    },
    "scheduler": {"name": "continuous", "max_num_seqs": 1, "max_num_batched_tokens": 256},
    "kv_cache": {"block_size": 16, "num_blocks": 64},
    "cost": {"name": "linear", "base_ms": 10.0},
    "slo": {"ttft_ms": T_MS},
}


def _rate_star(target: float, n: int = N) -> float:
    return 1.0 / (S_S - (T_MS / 1000 - C_S) / (math.ceil(target * n) - 1))


@pytest.mark.parametrize("target", [0.5, 0.9, 1.0])
def test_highest_rate_lands_within_tolerance_of_the_hand_computed_one(target):
    cap = find_capacity(scenario_from_dict(DD1), target, seeds=2, tolerance=0.02, workers=1)
    expected = _rate_star(target)
    assert cap.answer is not None
    assert expected * 0.98 <= cap.answer <= expected
    assert cap.per_seed == [cap.answer, cap.answer]  # deterministic: no spread
    above = min(x for x in cap.probes_x() if x > cap.answer)
    assert above > expected  # the probe just past the answer fails, as it must
    assert (above - cap.answer) / cap.answer <= 0.02


def test_the_curve_is_monotone_and_crosses_the_target_at_the_answer():
    cap = find_capacity(scenario_from_dict(DD1), 0.9, seeds=1, workers=1)
    curve = cap.curve()
    means = [p.mean for p in curve]
    assert means == sorted(means, reverse=True)
    assert [p.x for p in curve] == sorted(p.x for p in curve)
    for p in curve:  # every probe agrees with the formula
        k_max = math.floor((T_MS / 1000 - C_S) / (S_S - 1 / p.x)) if p.x > 10 else N
        assert p.mean == pytest.approx(min(k_max + 1, N) / N)
    assert max(p.x for p in curve if p.mean >= 0.9) == cap.answer


def test_poisson_attainment_falls_with_rate_for_every_seed():
    # one server, fixed service: with the same seed the gaps shrink as 1/λ, so by
    # Lindley's recursion no request waits less at a higher rate
    raw = copy.deepcopy(DD1)
    raw["workload"]["arrival"] = {"name": "poisson", "rate_per_s": 5.0}
    cap = find_capacity(scenario_from_dict(raw), 0.9, seeds=3, workers=1)
    assert cap.answer is not None
    for s in range(3):
        xs = sorted(x for x, i in cap.runs if i == s)
        att = [cap.runs[x, s][0] for x in xs]
        assert att == sorted(att, reverse=True)
    found = [x for x in cap.per_seed if x is not None]
    assert len(found) == 3
    assert min(found) <= cap.answer * 1.02
    assert max(found) >= cap.answer
    text = format_capacity(cap, "poisson")
    assert f"per-seed answers {min(found):.4g} to {max(found):.4g} req/s" in text


def test_fewest_replicas_by_hand():
    # 25 req/s round-robin over n replicas: each sees 25/n req/s; stable (every request
    # good) iff 25/n < 10, so 3. With 2 replicas: 12.5 req/s each, request k waits 20k ms,
    # good iff 20k + 10 <= 300: 15 of each replica's 60 → attainment 0.25.
    raw = copy.deepcopy(DD1)
    raw["workload"]["arrival"]["rate_per_s"] = 25.0
    raw["workload"]["num_requests"] = 120
    cap = find_capacity(scenario_from_dict(raw), 0.9, vary="cluster.replicas", seeds=1, workers=1)
    assert cap.answer == 3
    assert cap.runs[2.0, 0][0] == 0.25
    assert cap.runs[3.0, 0][0] == 1.0
    assert "answer: 3 replicas" in format_capacity(cap)


def test_an_slo_that_cannot_be_met_gives_no_answer_and_says_why():
    cap = find_capacity(
        scenario_from_dict(DD1), 0.9, slo={"tpot_ms": 5.0}, seeds=1, workers=1, max_steps=3
    )
    assert cap.answer is None
    assert "stays below 0.9 down to 0.625 req/s after 3 halvings" in cap.note
    assert format_capacity(cap).endswith(f"answer: none ({cap.note})")


def test_parse_slo_and_bad_input_are_one_line():
    assert parse_slo("ttft=300, tpot_ms=40") == {"ttft_ms": 300.0, "tpot_ms": 40.0}
    for text, message in [
        ("ttft=300,tbt=40", "--slo: got 'tbt=40', must be KEY=MS with KEY one of"),
        ("ttft=-1", "--slo ttft: got '-1', must be ms > 0"),
        ("ttft", "--slo: got 'ttft'"),
    ]:
        with pytest.raises(ScenarioError, match=message):
            parse_slo(text)
    sc = scenario_from_dict(DD1)
    for kwargs, message in [
        ({"vary": "arrival.rat"}, "--vary: got 'arrival.rat', must be one of"),
        ({"target": 1.5}, r"--attainment: got 1.5, must be in \(0, 1\]"),
        ({"seeds": 0}, "--seeds: got 0, must be >= 1"),
        ({"slo": {"ttft_msx": 3.0}}, "slo.ttft_msx: unknown field"),
    ]:
        with pytest.raises(ScenarioError, match=message):
            find_capacity(sc, **{"target": 0.9, **kwargs})
    raw = copy.deepcopy(DD1)
    del raw["slo"]
    with pytest.raises(ScenarioError, match="slo: none set"):
        find_capacity(scenario_from_dict(raw), 0.9)
    raw["workload"]["arrival"] = {"name": "closed_loop", "concurrency": 4}
    with pytest.raises(ScenarioError, match=r"workload\.arrival: got 'closed_loop'"):
        find_capacity(scenario_from_dict(raw), 0.9, slo={"ttft_ms": 300.0})


def test_cli_capacity_prints_the_curve_and_writes_it(tmp_path, capsys):
    import yaml

    path = tmp_path / "dd1.yaml"
    path.write_text(yaml.safe_dump(DD1))
    out = tmp_path / "cap"
    args = ["capacity", str(path), "--slo", "ttft=300", "--attainment", "0.9"]
    assert main([*args, "--seeds", "1", "--workers", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "capacity of dd1: highest rate with mean SLO attainment >= 0.9" in text
    assert "answer: 10.31 req/s" in text
    rows = (out / "capacity_curve.csv").read_text().splitlines()
    assert rows[0].startswith("rate_per_s,mean_attainment,min_attainment,max_attainment")
    printed = text.split("goodput(req/s)\n")[1].split("answer:")[0].splitlines()[1:]  # (rule)
    assert len(rows) == 1 + len(printed) >= 6  # header + one row per printed probe
    assert (out / "capacity.png").stat().st_size > 0
    assert main(["capacity", str(path), "--slo", "ttft=0"]) == 2
    assert capsys.readouterr().err.strip() == "lyra-simpy: --slo ttft: got '0', must be ms > 0"


def test_write_capacity_without_an_answer(tmp_path):
    cap = find_capacity(
        scenario_from_dict(DD1), 0.9, slo={"tpot_ms": 5.0}, seeds=1, workers=1, max_steps=1
    )
    table, figure = write_capacity(cap, tmp_path)
    assert len(table.read_text().splitlines()) == 1 + len(cap.curve())
    assert figure.exists()


def test_a_process_pool_probes_the_same_points_with_the_same_results():
    raw = copy.deepcopy(DD1)
    raw["workload"]["arrival"] = {"name": "poisson", "rate_per_s": 5.0}
    serial = find_capacity(scenario_from_dict(raw), 0.9, seeds=2, workers=1)
    pooled = find_capacity(scenario_from_dict(raw), 0.9, seeds=2, workers=2)
    assert pooled.runs == serial.runs
    assert (pooled.answer, pooled.per_seed) == (serial.answer, serial.per_seed)
