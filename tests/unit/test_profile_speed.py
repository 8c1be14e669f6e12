"""``cost.speed`` of the ``profile`` cost model: every time the fit prices (its terms, its
decode residuals and a fitted wake) × the host's speed at the load over the profile's."""

from __future__ import annotations

import pytest
import yaml

from builders import trace_workload
from lyra_simpy.calibration.fit import fit_profile
from lyra_simpy.calibration.fitfile import write_fit
from lyra_simpy.calibration.profiles import read_profile
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


def _scenario(tmp_path, make_scenario, fit, speed: float, path_ms: float, wake="fitted"):
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
