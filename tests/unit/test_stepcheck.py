"""compare --steps: the real runs' engine steps, rebuilt from their streams, against what
the scenario's cost model charges for each.

The runs are the simulator's own (written as a replay writes them), so a scenario's own
runs must come out at exactly 1, and the same runs checked against a model 20 % cheaper
at 1.25."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from builders import runs_raw, write_run
from lyra_simpy import scenario_from_dict, simulate
from lyra_simpy.calibration.fitfile import load_fit, write_fit
from lyra_simpy.cli import main
from lyra_simpy.errors import LyraError
from lyra_simpy.live.stepcheck import (
    STEP_TOLERANCE,
    at_this_prompt_speed,
    at_this_speed,
    step_check,
    verdict,
)
from lyra_simpy.metrics.io import write_json

DATA = Path(__file__).resolve().parents[1] / "data"


def _runs(raw: dict[str, Any], folder: Path, seeds: tuple[int, ...] = (1, 2)) -> list[Path]:
    out = []
    for seed in seeds:
        res = simulate(scenario_from_dict({**raw, "seed": seed}))
        assert (res.records["status"] == "ok").all()
        out.append(write_run(res, folder / f"run{seed}"))
    return out


def _cheaper(folder: Path, factor: float) -> Path:
    """tests/data/synthetic_fit.yaml with every coefficient × *factor*."""
    fit = load_fit(DATA / "synthetic_fit.yaml")
    coef = fit.coefficients.model_copy(
        update={k: v * factor for k, v in fit.coefficients.model_dump().items()}
    )
    path = folder / f"fit_x{factor}.yaml"
    write_fit(fit.model_copy(update={"coefficients": coef}), path)
    return path


def test_a_scenarios_own_runs_cost_what_it_charges(tmp_path):
    raw = runs_raw(1, 10.0, 80)
    runs = _runs(raw, tmp_path)
    check = step_check(scenario_from_dict(raw), runs)
    assert check["decode"]["steps"] > 100
    assert check["prompt"]["steps"] > 50
    for kind in ("decode", "prompt"):
        for stat in ("median", "mean", "p10", "p90"):
            assert check[kind][stat] == pytest.approx(1.0, abs=1e-6), (kind, stat)
    assert all(v["median"] == pytest.approx(1.0) for v in check["decode_by_batch"].values())
    assert len(check["decode_by_batch"]) > 3
    sizes = check["prompt_by_tokens"]
    assert list(sizes) == ["17-64", "65-256", "257+"]  # prompts of 16-400 tokens, whole
    assert sum(v["steps"] for v in sizes.values()) == check["prompt"]["steps"]
    assert all(v["median"] == pytest.approx(1.0) for v in sizes.values())
    assert check["left_out"] == 0
    assert check["verdict"].startswith(f"decode steps within {STEP_TOLERANCE:.0%}")


def test_a_model_20_percent_cheap_reads_1_25(tmp_path):
    raw = runs_raw(1, 10.0, 80)
    runs = _runs(raw, tmp_path)
    cheap = {**raw, "cost": {"name": "profile", "path": str(_cheaper(tmp_path, 0.8))}}
    check = step_check(scenario_from_dict(cheap), runs)
    for kind in ("decode", "prompt"):
        assert check[kind]["median"] == pytest.approx(1.25, rel=1e-6), kind
    assert "decode steps ran 25% slower than the model charges" in check["verdict"]
    assert check["speed"] == pytest.approx(1.25, rel=1e-6)  # (cost.speed 1 × the mean)
    # priced at that speed the same runs cost what the scenario charges
    at_speed = {**raw, "cost": {**cheap["cost"], "speed": check["speed"]}}
    again = step_check(scenario_from_dict(at_speed), runs)
    for kind in ("decode", "prompt"):
        assert again[kind]["mean"] == pytest.approx(1.0, rel=1e-6), kind
    assert again["speed"] == pytest.approx(check["speed"], rel=1e-6)
    assert "decode steps ran 10% quicker" in verdict(0.9)
    assert verdict(None).startswith("no decode-only step")


def test_a_host_that_moved_the_phases_apart_gets_a_speed_for_each(tmp_path):
    # runs at speed 1 checked against the same fit priced 0.8 for decode steps and 0.5
    # for the steps with a prompt: each phase reads its own ratio, and priced at the two
    # speeds the check prints, the runs cost what the scenario charges in both
    raw = runs_raw(1, 10.0, 80)
    runs = _runs(raw, tmp_path)
    moved = {**raw, "cost": {**raw["cost"], "speed": 0.8, "prompt_speed": 0.5}}
    check = step_check(scenario_from_dict(moved), runs)
    assert check["decode"]["median"] == pytest.approx(1.25, rel=1e-6)
    assert check["prompt"]["median"] == pytest.approx(2.0, rel=1e-6)
    assert check["speed"] == pytest.approx(1.0, rel=1e-6)
    assert check["prompt_speed"] == pytest.approx(1.0, rel=1e-6)
    plain = step_check(scenario_from_dict(raw), runs)
    assert plain["prompt_speed"] == pytest.approx(1.0, rel=1e-6)  # (unset: at speed)
    profile = scenario_from_dict(moved).replica_specs()[0].cost
    assert at_this_prompt_speed(profile, 1.1) == pytest.approx(0.55)
    assert at_this_prompt_speed(profile, None) is None
    linear = scenario_from_dict({**raw, "cost": {"name": "linear"}}).replica_specs()[0].cost
    assert at_this_prompt_speed(linear, 1.1) is None


def test_only_a_profile_cost_with_decode_steps_gets_a_speed(tmp_path):
    raw = runs_raw(1, 10.0, 20)
    profile = scenario_from_dict(raw).replica_specs()[0].cost
    assert at_this_speed(profile, 1.1) == pytest.approx(1.1)
    assert at_this_speed(profile, None) is None  # (no decode-only step rebuilt)
    linear = scenario_from_dict({**raw, "cost": {"name": "linear"}}).replica_specs()[0].cost
    assert at_this_speed(linear, 1.1) is None


def test_a_fit_wrong_for_one_range_of_prompts_shows_in_its_bin(tmp_path):
    """A fit that charges a prompt's attention but not its tokens (what a fit on one
    load's runs did, docs/VALIDATION-llamacpp.md item 25) prices prompt steps cheap by a
    ratio that moves with their size (here, with a fixed step cost of 5 ms, the longer
    the cheaper): the bins tell the ranges apart where the prompt median would not."""
    raw = runs_raw(1, 10.0, 80)
    runs = _runs(raw, tmp_path)
    fit = load_fit(DATA / "synthetic_fit.yaml")
    coef = fit.coefficients.model_copy(update={"per_prefill_token_ms": 0.0})
    path = tmp_path / "fit_no_token.yaml"
    write_fit(fit.model_copy(update={"coefficients": coef}), path)
    check = step_check(scenario_from_dict({**raw, "cost": {"name": "profile", "path": str(path)}}),
                       runs)  # fmt: skip
    sizes = [v["median"] for v in check["prompt_by_tokens"].values()]
    assert all(x > 1.05 for x in sizes)
    assert sizes == sorted(sizes)
    assert sizes[-1] - sizes[0] > 0.5
    assert check["decode"]["median"] == pytest.approx(1.0, abs=1e-6)


def test_llamacpp_runs_count_passes_checkpoints_and_the_request_path(tmp_path):
    """Per-slot KV (a pass per run of consecutive slots), context checkpoints (a
    prompt's last tokens in a step of their own, the earlier ones in a step the stream
    may not show) and each arrival's path charged to the step it lands in: priced as the
    engine charged them, the steps read 1 — and without the path charge, the steps a
    request was sent in read more than 1 (the mean moves)."""
    raw = runs_raw(3, 6.0, 60)
    raw["scheduler"] = {"name": "llamacpp", "n_parallel": 4, "kv_unified": False,
                        "sliding_window": True, "cache_prompt": False}  # fmt: skip
    raw["workload"]["request_path_ms"] = 4.0
    raw["workload"]["request_path_cpu_share"] = 1.0
    runs = _runs(raw, tmp_path)
    check = step_check(scenario_from_dict(raw), runs)
    assert check["decode"]["median"] == pytest.approx(1.0, abs=1e-6)
    assert check["decode"]["p10"] == pytest.approx(1.0, abs=1e-6)
    assert check["decode"]["p90"] == pytest.approx(1.0, abs=1e-6)
    assert check["prompt"]["median"] == pytest.approx(1.0, abs=1e-6)
    assert check["left_out"] > 0  # a prompt's first chunk hidden in its first token's step
    raw["workload"]["request_path_cpu_share"] = 0.0
    unpathed = step_check(scenario_from_dict(raw), runs)
    assert unpathed["decode"]["median"] == pytest.approx(1.0, abs=1e-6)
    assert unpathed["decode"]["mean"] > check["decode"]["mean"] + 1e-3


def test_one_replica_and_no_speculation(tmp_path):
    raw = runs_raw(1, 10.0, 10)
    runs = _runs(raw, tmp_path, seeds=(1,))
    with pytest.raises(LyraError, match=r"--steps: runs has 2 replicas; the check takes one"):
        step_check(scenario_from_dict({**raw, "cluster": {"replicas": 2}}), runs)
    spec = {**raw, "speculative": {"num_steps": 1, "mean_accepted_tokens": 0.7}}
    with pytest.raises(LyraError, match=r"--steps: runs has speculative decoding"):
        step_check(scenario_from_dict(spec), runs)


def test_compare_steps_prints_the_check_and_writes_it_beside_the_json(tmp_path, capsys):
    raw = runs_raw(1, 10.0, 40)
    runs = _runs(raw, tmp_path, seeds=(1,))
    sim = tmp_path / "sim"
    sim.mkdir()
    res = simulate(scenario_from_dict(raw))
    write_json(sim / "summary.json", res.summary)
    for run in runs:
        write_json(run / "summary.json", res.summary)
    scen = tmp_path / "cheap.yaml"
    cheap = {**raw, "cost": {"name": "profile", "path": str(_cheaper(tmp_path, 0.8))}}
    scen.write_text(yaml.safe_dump(cheap))
    out = tmp_path / "cmp.json"
    code = main(["compare", str(sim), *map(str, runs), "--steps", str(scen), "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "real steps / what the model charges" in text
    assert "decode-only   median 1.25" in text
    assert "decode steps ran 25% slower" in text
    assert "priced at these runs' speed: cost.speed: 1.25 (the decode steps' mean" in text
    assert "and its steps with a prompt: cost.prompt_speed: 1.25 (their mean" in text
    saved = json.loads((tmp_path / "cmp-steps.json").read_text())
    assert saved["decode"]["median"] == pytest.approx(1.25)
    assert f"wrote {tmp_path / 'cmp-steps.json'}" in text
    assert np.isclose(json.loads(out.read_text())[0]["error"], 0.0)
