"""Sweep files: expansion into points, validation before anything runs, point keys."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import TINY
from lyra_simpy import ScenarioError
from lyra_simpy.sweep import load_sweep, point_key, sweep_from_dict

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"


def _sweep(**fields: Any) -> dict[str, Any]:
    return {"base": copy.deepcopy(TINY), **fields}


def test_grid_zip_and_seeds_expand_in_order():
    sweep = sweep_from_dict(
        _sweep(
            grid={"scheduler.max_num_seqs": [2, 4], "cost.base_ms": [5.0, 10.0, 20.0]},
            zip={"slo.ttft_ms": [100.0, 200.0], "slo.tpot_ms": [10.0, 30.0]},
            seeds=[3, 5],
        )
    )
    assert len(sweep.points) == 2 * 3 * 2 * 2
    assert sweep.swept == ["scheduler.max_num_seqs", "cost.base_ms", "slo.ttft_ms", "slo.tpot_ms"]
    first, second, third = sweep.points[:3]
    assert first.values == {
        "scheduler.max_num_seqs": 2,
        "cost.base_ms": 5.0,
        "slo.ttft_ms": 100.0,
        "slo.tpot_ms": 10.0,
    }
    assert (first.seed, second.seed) == (3, 5)
    assert third.values["slo.ttft_ms"] == 200.0  # zip rows inside the grid, seeds innermost
    assert third.values["slo.tpot_ms"] == 30.0
    last = sweep.points[-1]
    assert last.scenario.scheduler.max_num_seqs == 4
    assert last.scenario.cost.base_ms == 20.0
    assert last.scenario.slo.tpot_ms == 30.0
    assert last.scenario.seed == 5
    assert [p.index for p in sweep.points] == list(range(len(sweep.points)))


def test_a_seed_count_counts_up_from_the_base_seed():
    sweep = sweep_from_dict(_sweep(seeds=3))
    assert [p.seed for p in sweep.points] == [TINY["seed"], TINY["seed"] + 1, TINY["seed"] + 2]
    assert sweep.swept == []


def test_the_key_names_the_simulation_not_its_label_or_executor():
    sweep = sweep_from_dict(_sweep(grid={"scheduler.max_num_seqs": [2, 4]}, seeds=2))
    keys = [p.key for p in sweep.points]
    assert len(set(keys)) == 4
    again = sweep_from_dict(_sweep(grid={"scheduler.max_num_seqs": [2, 4]}, seeds=2))
    assert [p.key for p in again.points] == keys
    relabelled = sweep.points[0].scenario.with_values({"label": "other", "name": "x"})
    assert point_key(relabelled) == keys[0]
    assert point_key(sweep.points[0].scenario.with_values({"seed": 99})) != keys[0]


def test_equal_scenarios_share_a_key():
    # max_num_seqs 4 is the base's own value: the zip's two rows are the same simulation
    sweep = sweep_from_dict(_sweep(zip={"scheduler.max_num_seqs": [4, 4]}))
    assert sweep.points[0].key == sweep.points[1].key


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"zip": {"cost.base_ms": [1.0, 2.0], "slo.ttft_ms": [100.0]}},
            "zip: got lists of lengths cost.base_ms: 2, slo.ttft_ms: 1, must all be equally long",
        ),
        (
            {"grid": {"scheduler.max_num_seqs": [4, 0]}},
            "sweep point (scheduler.max_num_seqs=0, seed=7): scheduler.continuous.max_num_seqs:"
            " got 0, must be greater than 0",
        ),
        (
            {"grid": {"scheduler.max_num_seq": [4]}},
            "sweep point (scheduler.max_num_seq=4, seed=7): scheduler.continuous.max_num_seq: "
            "unknown field",
        ),
        (
            {"grid": {"cost.base_ms": []}},
            "grid: cost.base_ms: got [], must list at least one value",
        ),
        ({"grid": {"seed": [1, 2]}}, "grid: got path 'seed', must be set through seeds:"),
        ({"seeds": [1, 1]}, "seeds: got [1, 1], must be a non-empty list of distinct seeds"),
        ({"seed": 3}, "seed: unknown field"),
    ],
)
def test_a_bad_sweep_fails_in_one_line_before_running(fields, message):
    with pytest.raises(ScenarioError) as err:
        sweep_from_dict(_sweep(**fields))
    text = str(err.value)
    assert text.startswith(message)
    assert "\n" not in text


def test_a_sweep_file_reads_its_base_relative_to_itself_and_applies_quick(tmp_path):
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "tiny.yaml").write_text(
        yaml.safe_dump({**TINY, "quick": {"workload": {"num_requests": 5}}})
    )
    (tmp_path / "sweeps").mkdir()
    path = tmp_path / "sweeps" / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "base": "../scenarios/tiny.yaml",
                "grid": {"cost.base_ms": [1.0, 2.0]},
                "seeds": 3,
                "quick": {"seeds": 1},
            }
        )
    )
    full = load_sweep(path)
    assert full.name == "s"
    assert len(full.points) == 6
    assert full.points[0].scenario.workload.num_requests == 12
    quick = load_sweep(path, overrides=["scheduler.max_num_seqs=2"], quick=True)
    assert len(quick.points) == 2
    assert quick.points[0].scenario.workload.num_requests == 5
    assert quick.points[0].scenario.scheduler.max_num_seqs == 2


def test_the_base_scenarios_own_grid_is_replaced_by_the_sweeps():
    sweep = load_sweep(SWEEPS / "lab02_depth_x_rate.yaml", quick=True)
    assert sweep.base.grid is None
    assert len(sweep.points) == 4 * 4 * 3
    assert {p.scenario.label for p in sweep.points[:2]} == {
        "scheduler.max_num_seqs=4,workload.arrival.rate_per_s=1.0"
    }
    assert all(p.scenario.workload.num_requests == 150 for p in sweep.points)


def test_a_missing_base_file_is_one_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("base: nowhere.yaml\n")
    with pytest.raises(ScenarioError, match=r"nowhere.yaml: cannot read scenario"):
        load_sweep(path)
    with pytest.raises(ScenarioError, match=r"cannot read sweep"):
        load_sweep(tmp_path / "absent.yaml")


def test_a_file_the_scenario_reads_enters_the_key_by_content(tmp_path):
    fit = Path(__file__).resolve().parents[1] / "data" / "synthetic_fit.yaml"
    (tmp_path / "fit.yaml").write_text(fit.read_text())
    base = {**copy.deepcopy(TINY), "cost": {"name": "profile", "path": "fit.yaml"}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "s.yaml").write_text("base: tiny.yaml\n")
    before = load_sweep(tmp_path / "s.yaml").points[0]
    with (tmp_path / "fit.yaml").open("a") as fh:
        fh.write("\n# refitted\n")
    assert point_key(before.scenario) != before.key
    assert load_sweep(tmp_path / "s.yaml").points[0].key != before.key
