"""``cost.wake``: the first iteration after the engine idled ``after_s`` or more takes
``ms`` longer (:mod:`lyra_simpy.cost.wake`), and how a fit reads it from the profile's
wake probe."""

from __future__ import annotations

import numpy as np
import pytest

from builders import trace_workload
from lyra_simpy.calibration.fit import fit_profile
from lyra_simpy.calibration.profiles import read_profile
from lyra_simpy.calibration.wakefit import read_wake
from lyra_simpy.cost.wake import WakeConfig, fitted_wake
from lyra_simpy.errors import ScenarioError, TraceError
from lyra_simpy.simulation import simulate


def _changes(tmp_path, wake: object, fuse: bool = True) -> dict:
    # r0 at 0: prompt to 10 ms, its 2nd token at 20 ms; r1 at 0.5 s (0.48 s idle);
    # r2 at 0.6 s (idle since r1's end: < 0.3 s); r3 at 2 s
    rows = [(0.0, 4, 2), (0.5, 4, 2), (0.6, 4, 3), (2.0, 4, 2)]
    return {
        **trace_workload(tmp_path, rows),
        "scheduler": {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 64},
        "cost": {"name": "linear", "base_ms": 10, **({"wake": wake} if wake else {})},
        "simulation.fuse_iterations": fuse,
    }


def test_the_first_iteration_after_idle_pays_the_wake(make_scenario, tmp_path):
    wake = {"after_s": 0.3, "ms": 7}
    rec = simulate(make_scenario(_changes(tmp_path, wake), base_dir=tmp_path)).records
    # r0 reaches an engine that stood idle before the run: its prompt 17 ms; r1 after
    # 0.473 s of idle: 17 ms; r2 after 63 ms: none; r3 after 1.37 s: 17 ms
    assert rec["first_token_s"] == pytest.approx([0.017, 0.517, 0.610, 2.017], abs=1e-12)
    assert rec["finish_s"] == pytest.approx([0.027, 0.527, 0.630, 2.027], abs=1e-12)
    plain = simulate(make_scenario(_changes(tmp_path, None), base_dir=tmp_path)).records
    assert plain["first_token_s"] == pytest.approx([0.010, 0.510, 0.610, 2.010], abs=1e-12)
    # fused decode runs change nothing: the wake falls on a planned iteration
    unfused = make_scenario(_changes(tmp_path, wake, fuse=False), base_dir=tmp_path)
    assert simulate(unfused).records["finish_s"] == pytest.approx(rec["finish_s"], abs=1e-12)


def test_an_engine_idle_from_the_start_pays_it_for_its_first_request(make_scenario):
    # the first arrival comes at the run's start, to an engine that stood idle before it
    changes = {"workload.arrival": {"name": "poisson", "rate_per_s": 0.5}}
    plain = simulate(make_scenario(changes)).records
    woken = simulate(make_scenario({**changes, "cost.wake": {"after_s": 0.05, "ms": 7}})).records
    assert plain["arrival_s"][0] == 0.0
    assert woken["first_token_s"][0] - plain["first_token_s"][0] == pytest.approx(0.007, abs=1e-12)


def test_a_wake_of_zero_changes_nothing(make_scenario, tmp_path):
    zero = simulate(make_scenario(_changes(tmp_path, {"after_s": 0.1, "ms": 0}), base_dir=tmp_path))
    plain = simulate(make_scenario(_changes(tmp_path, None), base_dir=tmp_path))
    assert zero.records["finish_s"] == pytest.approx(plain.records["finish_s"], abs=0)


def test_bad_wakes_are_one_line_errors(make_scenario, tmp_path):
    for wake, words in (
        ({"after_s": 0, "ms": 5}, "after_s"),
        ({"after_s": 0.3, "ms": -1}, "ms"),
        ({"after_s": 0.3}, "ms"),
        ("fitted", "wake: got 'fitted', but the linear cost model has no fit file"),
    ):
        with pytest.raises(ScenarioError) as info:
            make_scenario(_changes(tmp_path, wake), base_dir=tmp_path)
        assert words in str(info.value)
        assert "\n" not in str(info.value).strip()


def test_fitted_wake_reads_the_gap_where_prompts_slow_down():
    rng = np.random.default_rng(3)
    gaps = np.repeat([0.0, 0.05, 0.2, 0.5, 2.0], 8)
    excess = {0.0: 0.0, 0.05: 0.5, 0.2: 6.0, 0.5: 15.0, 2.0: 16.0}
    ms = 40.0 + np.array([excess[g] for g in gaps]) + rng.normal(0, 0.3, len(gaps))
    found = fitted_wake(gaps, ms)
    assert found is not None
    got, base, by_gap = found
    # half the largest excess (8 ms) is first reached at 0.5 s
    assert got.after_s == 0.5
    assert got.ms == pytest.approx(15.5, abs=1.0)
    # what it was read from: the back-to-back median and each gap's excess over it
    assert base == pytest.approx(float(np.median(ms[gaps == 0])))
    assert list(by_gap) == [0.05, 0.2, 0.5, 2.0]
    assert [by_gap[g] for g in by_gap] == pytest.approx([0.5, 6.0, 15.0, 16.0], abs=0.5)
    # no gap slower than back to back: no wake; without back-to-back prompts or gaps: None
    flat = fitted_wake(gaps, np.full(len(gaps), 40.0))
    assert flat is not None
    assert flat[0] == WakeConfig(after_s=2.0, ms=0.0)
    assert fitted_wake(gaps[gaps > 0], ms[gaps > 0]) is None
    assert fitted_wake(np.zeros(4), np.full(4, 40.0)) is None


def _profile(tmp_path, wake_rows: str | None):
    rows = ["phase,batch_size,input_tokens,context_len,latency_ms"]
    rows += [f"prefill,1,{n},0,{5 + 0.5 * n}" for n in (16, 64, 256)]
    rows += [f"decode,{b},0,{c},{10 + 3 * b}" for b in (1, 2, 4) for c in (64, 256)]
    path = tmp_path / "p.csv"
    path.write_text("\n".join(rows) + "\n")
    if wake_rows is not None:
        path.with_suffix(".wake.csv").write_text(wake_rows)
    return path


def test_calibrate_reads_the_wake_probe_beside_the_profile(tmp_path):
    lines = ["gap_s,latency_ms"]
    lines += [f"0,{13 + d}" for d in (0.0, 0.4, -0.3, 0.2)]
    lines += [f"0.1,{13 + d}" for d in (0.1, 0.5, -0.2, 0.0)]
    lines += [f"1.0,{28 + d}" for d in (0.0, 0.6, -0.4, 0.1)]
    path = _profile(tmp_path, "\n".join(lines) + "\n")
    fit = fit_profile(read_profile(path))
    assert fit.wake is not None
    assert (fit.wake.after_s, fit.wake.prompts) == (1.0, 12)
    assert fit.wake.back_to_back_ms == pytest.approx(13.1, abs=1e-9)
    assert fit.wake.ms == pytest.approx(28.05 - 13.1, abs=1e-9)
    from lyra_simpy.calibration.fitfile import format_report

    assert (
        f"the engine's wake after idle (cost.wake: fitted): {fit.wake.ms:.1f} ms on the "
        "first step after 1 s idle (the wake probe's 12 lone prompts; 13.1 ms back to back)"
    ) in format_report(fit)
    # each gap's excess is kept and printed: 0.1 s median 13.05 ms, 1 s 28.05 ms
    assert fit.wake.excess_ms == pytest.approx({0.1: -0.05, 1.0: 14.95})
    assert "; by idle gap: 0.1 s -0.1 ms, 1 s +14.9 ms" in format_report(fit)
    (tmp_path / "plain").mkdir()
    assert fit_profile(read_profile(_profile(tmp_path / "plain", None))).wake is None


def test_a_bad_wake_probe_is_a_one_line_error(tmp_path):
    path = _profile(tmp_path, "gap_s,latency_ms\n0,13\n0.5,abc\n")
    with pytest.raises(TraceError) as info:
        read_wake(path)
    assert "row 3: latency_ms: got 'abc', must be a number >= 0" in str(info.value)
    path.with_suffix(".wake.csv").write_text("gap,latency_ms\n0,13\n")
    with pytest.raises(TraceError, match="missing column gap_s"):
        read_wake(path)


def test_table_1_charges_the_wake_its_fit_holds(tmp_path):
    # validation/llamacpp_points.py: cost.wake: fitted where the point's fit has a wake
    from builders import validation_module
    from lyra_simpy.calibration.fitfile import write_fit

    matrix = validation_module("llamacpp_points")
    fit = tmp_path / "fit_probes.yaml"
    args = ("poisson_0.3", matrix.CONFIGS["default"], matrix.REGIMES["short"], False,
            str(fit), "poisson_0.3", 4.0)  # fmt: skip
    assert "wake" not in matrix.scenario(*args)["cost"]
    (tmp_path / "plain").mkdir()
    write_fit(fit_profile(read_profile(_profile(tmp_path / "plain", None))), fit)
    assert "wake" not in matrix.scenario(*args)["cost"]
    probe = "gap_s,latency_ms\n0,13\n0,13.2\n0.3,27\n0.3,27.2\n"
    write_fit(fit_profile(read_profile(_profile(tmp_path, probe))), fit)
    assert matrix.scenario(*args)["cost"]["wake"] == "fitted"
    # the point's JSON keeps it (the document's line under each point)
    res: dict = {}
    validation_module("llamacpp_tables").with_idle(tmp_path, res)
    assert (res["wake"]["after_s"], res["wake"]["prompts"]) == (0.3, 4)
    assert res["wake"]["ms"] == pytest.approx(14.0)
