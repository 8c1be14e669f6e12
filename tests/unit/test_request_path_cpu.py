"""``workload.request_path_cpu_share``: a request's path to the engine, run on the engine's
own cores, lengthens the iteration it lands in (docs/VALIDATION-llamacpp.md item 18)."""

from __future__ import annotations

import numpy as np
import pytest

from builders import trace_workload, validation_module
from lyra_simpy.errors import ScenarioError
from lyra_simpy.simulation import simulate
from lyra_simpy.workload.source import ClosedLoopSource, Drawn, OpenLoopSource


def _changes(tmp_path, share: float) -> dict:
    # r0 sent at 0, r1 at 25 ms; each reaches the engine 2 ms after its send
    return {
        **trace_workload(tmp_path, [(0.0, 4, 5), (0.025, 4, 2)]),
        "workload.request_path_ms": 2.0,
        "workload.request_path_cpu_share": share,
        "scheduler": {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 64},
        "cost": {"name": "linear", "base_ms": 10},
    }


def test_an_arrival_lengthens_the_iteration_it_lands_in(make_scenario, tmp_path):
    # 10 ms an iteration. r0 reaches an idle engine at 2 ms (nothing to charge): its
    # prompt to 12, decodes to 22 and 32 + 2, since r1 reaches the engine at 27 ms,
    # inside that iteration; r1's prompt beside r0's decode to 44, then 54
    rec = simulate(make_scenario(_changes(tmp_path, 1.0), base_dir=tmp_path)).records
    assert rec["first_token_s"] == pytest.approx([0.012, 0.044], abs=1e-12)
    assert rec["finish_s"] == pytest.approx([0.054, 0.054], abs=1e-12)
    # the same at share 0: every iteration 10 ms
    rec = simulate(make_scenario(_changes(tmp_path, 0.0), base_dir=tmp_path)).records
    assert rec["first_token_s"] == pytest.approx([0.012, 0.042], abs=1e-12)
    assert rec["finish_s"] == pytest.approx([0.052, 0.052], abs=1e-12)
    # half the path: 1 ms
    rec = simulate(make_scenario(_changes(tmp_path, 0.5), base_dir=tmp_path)).records
    assert rec["first_token_s"][1] == pytest.approx(0.043, abs=1e-12)


def test_sources_count_the_arrivals_they_know_of():
    times = np.array([0.0, 0.010, 0.010, 0.030])
    lengths = np.array([4, 4, 4, 4])
    src = OpenLoopSource(times, lengths, lengths, path_s=0.002)
    assert [src.arrivals_before(t) for t in (0.002, 0.0021, 0.012, 0.0121, 1.0)] == [0, 1, 1, 3, 4]
    src.pop_until(0.012)
    assert src.arrivals_before(1.0) == 1  # the taken ones are not counted again

    def draw(start: int, size: int) -> tuple:
        return np.full(size, 4), np.full(size, 4), None

    loop = ClosedLoopSource(2, 0.0, Drawn(3, draw), path_s=0.002)
    assert (loop.arrivals_before(0.002), loop.arrivals_before(0.0021)) == (0, 2)
    loop.pop_until(0.002)
    loop.on_finish(0.020)  # the third request, sent at 20 ms, reaches the engine at 22
    assert (loop.arrivals_before(0.022), loop.arrivals_before(0.023)) == (0, 1)


def test_the_share_needs_a_path_and_a_single_engine(make_scenario):
    with pytest.raises(ScenarioError) as info:
        make_scenario({"workload.request_path_cpu_share": 1.0})
    assert "request_path_cpu_share: got 1.0 with request_path_ms 0" in str(info.value)
    with pytest.raises(ScenarioError) as info:
        make_scenario({"workload.request_path_cpu_share": 1.5, "workload.request_path_ms": 2})
    assert "request_path_cpu_share" in str(info.value)
    changes = {"workload.request_path_ms": 2.0, "workload.request_path_cpu_share": 1.0,
               "cluster": {"replicas": 2}}  # fmt: skip
    with pytest.raises(ScenarioError) as info:
        make_scenario(changes)
    assert "request_path_cpu_share: got 1.0 with a cluster" in str(info.value)


def test_the_matrix_charges_table_1s_path_and_not_table_2s(tmp_path):
    # validation/llamacpp_points.py: Table 1's scenarios take the profile's path at share
    # REQUEST_PATH_CPU_SHARE (1); without a measured path, none
    matrix = validation_module("llamacpp_points")
    fit = tmp_path / "fit_probes.yaml"
    args = ("closed_4", matrix.CONFIGS["default"], matrix.REGIMES["short"], False, str(fit),
            "closed_4", None)  # fmt: skip
    assert matrix.scenario(*args)["workload"]["request_path_cpu_share"] == 0.0
    (tmp_path / "profile.yaml").write_text("engine: llamacpp\nrequest_path_ms: 4.66\n")
    work = matrix.scenario(*args)["workload"]
    assert (work["request_path_ms"], work["request_path_cpu_share"]) == (4.66, 1.0)
    assert matrix.REQUEST_PATH_CPU_SHARE == 1.0
