"""``cost.speed`` of the ``profile`` cost model: every time the fit prices (its terms, its
decode residuals and a fitted wake) × the host's speed at the load over the profile's."""

from __future__ import annotations

import pytest
import yaml

from builders import trace_workload
from lyra_simpy.calibration.fit import fit_profile
from lyra_simpy.calibration.fitfile import write_fit
from lyra_simpy.calibration.profiles import read_profile
from lyra_simpy.cost.base import BatchShape
from lyra_simpy.cost.profiled import ProfileCost
from lyra_simpy.cost.wake import resolved_wake
from lyra_simpy.errors import ScenarioError
from lyra_simpy.simulation import simulate


def _fit_file(tmp_path):
    """A fit with every kind of step cost: terms, decode residuals per batch, a wake."""
    rows = ["phase,batch_size,input_tokens,context_len,latency_ms"]
    rows += [f"prefill,1,{n},0,{5 + 0.5 * n}" for n in (16, 64, 256)]
    rows += [f"decode,{b},0,{c},{10 + 3 * b + (4 if b == 2 else 0)}"
             for b in (1, 2, 4) for c in (64, 256)]  # fmt: skip
    path = tmp_path / "p.csv"
    path.write_text("\n".join(rows) + "\n")
    path.with_suffix(".wake.csv").write_text("gap_s,latency_ms\n0,13\n0,13.2\n0.3,27\n0.3,27.2\n")
    out = tmp_path / "fit.yaml"
    write_fit(fit_profile(read_profile(path)), out)
    return out


def _scenario(tmp_path, make_scenario, fit, speed: float, path_ms: float, wake="fitted", **cost):
    # every request at 0 (the timeline is then only the step costs) and the path charged
    # to the engine: doubling every time doubles every request's times exactly
    rows = [(0.0, 40, 12), (0.0, 200, 5), (0.0, 16, 30), (0.0, 90, 9), (0.0, 60, 20)]
    changes = {
        **trace_workload(tmp_path, rows),
        "engine": {"name": "llamacpp", "command": "llama-server -np 4 -c 4096 -t 2"},
        "scheduler": {"name": "llamacpp", "cache_prompt": False},
        "kv_cache": {},
        "cost": {
            "name": "profile",
            "path": str(fit),
            "decode_table": True,
            "wake": wake,
            "speed": speed,
            **cost,
        },
        "workload.request_path_ms": path_ms,
        "workload.request_path_cpu_share": 1.0,
    }
    return make_scenario(changes, base_dir=tmp_path)


def test_speed_scales_every_time_the_fit_prices(tmp_path, make_scenario):
    fit_path = _fit_file(tmp_path)
    fit = yaml.safe_load(fit_path.read_text())
    assert fit["decode_batch_residual_ms"]  # each kind of step cost is there
    assert fit["wake"]["ms"] > 0
    base = _scenario(tmp_path, make_scenario, fit_path, 1.0, 5.0)
    doubled = _scenario(tmp_path, make_scenario, fit_path, 2.0, 10.0)
    plain, fast = simulate(base).records, simulate(doubled).records
    for column in ("first_token_s", "finish_s"):
        assert list(fast[column]) == pytest.approx([2 * t for t in plain[column]], rel=1e-12)
    # the wake read from the fit is a time the fit prices; one given in ms is not
    assert resolved_wake(doubled.cost).ms == pytest.approx(2 * fit["wake"]["ms"])
    given = _scenario(tmp_path, make_scenario, fit_path, 2.0, 10.0, {"after_s": 0.3, "ms": 7})
    assert resolved_wake(given.cost).ms == 7
    assert doubled.cost.calibration()["speed"] == 2.0  # (the run's manifest says so)


@pytest.mark.parametrize("bad", [0, -1.0])
def test_a_speed_that_is_not_positive_is_refused(tmp_path, make_scenario, bad):
    # one line naming the field, the value and what is allowed
    with pytest.raises(
        ScenarioError, match=rf"cost\.profile\.speed: got {bad}, must be greater than 0"
    ):
        _scenario(tmp_path, make_scenario, _fit_file(tmp_path), bad, 5.0)


def test_prompt_speed_prices_the_steps_with_a_prompt_and_leaves_decode_steps_at_speed(
    tmp_path, make_scenario
):
    fit_path = _fit_file(tmp_path)
    one = _scenario(tmp_path, make_scenario, fit_path, 1.2, 5.0)
    two = _scenario(tmp_path, make_scenario, fit_path, 1.2, 5.0, prompt_speed=1.8)
    plain, split = ProfileCost(one.cost, 4), ProfileCost(two.cost, 4)
    decode = BatchShape(0, 0, 0, 3, 3, 300)
    several = BatchShape(0, 0, 0, 3, 3, 300, passes=2, output_passes=2)
    prompt = BatchShape(1, 64, 64 * 64, 0, 0, 0)
    mixed = BatchShape(1, 40, 40 * 40, 2, 2, 200, passes=2, checkpoints=1)
    for shape in (decode, several):  # decode-only steps stay at speed
        assert split.iteration_s(shape) == plain.iteration_s(shape)
    for shape in (prompt, mixed):  # a step with a prompt: its whole time × 1.8 / 1.2
        assert split.iteration_s(shape) == pytest.approx(1.5 * plain.iteration_s(shape))
    # so is a simulation: the first tokens come later, the decode steps after them do not
    first, later = simulate(one).records, simulate(two).records
    assert (later["first_token_s"] > first["first_token_s"]).all()
    # the wake is a decode step's and stays at speed; the manifest names both
    assert resolved_wake(two.cost).ms == resolved_wake(one.cost).ms
    assert two.cost.calibration()["prompt_speed"] == 1.8
    assert "prompt_speed" not in one.cost.calibration()  # (unset: one speed, as before)
    same = _scenario(tmp_path, make_scenario, fit_path, 1.2, 5.0, prompt_speed=1.2)
    assert list(simulate(same).records["finish_s"]) == list(first["finish_s"])
    with pytest.raises(
        ScenarioError, match=r"cost\.profile\.prompt_speed: got 0, must be greater than 0"
    ):
        _scenario(tmp_path, make_scenario, fit_path, 1.0, 5.0, prompt_speed=0)
