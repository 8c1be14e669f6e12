"""Processes acting on a running cluster (issue 18): failures and repairs, retries, the
router waiting for a replica, an autoscaler, load that changes, and the handle a user's
process gets — against hand-computed numbers."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lyra_simpy import scenario_from_dict, simulate
from lyra_simpy.cluster.lifecycle import STATES, state_summary
from lyra_simpy.engine.replica import Process
from lyra_simpy.errors import ScenarioError, SimulationError
from lyra_simpy.metrics.summary import refusals_line
from lyra_simpy.output.writer import write_variant
from lyra_simpy.processes import PROCESSES, Cluster
from lyra_simpy.processes.autoscaler import AutoscalerConfig, desired_replicas
from lyra_simpy.processes.handle import ReplicaStatus
from lyra_simpy.scenario import set_path

#: 1 replica (a cluster of one once processes are on), constant arrivals every 0.1 s,
#: prompts of 10 tokens and 100 output tokens, 10 ms per iteration whatever the batch:
#: a request runs ~1 s (a prefill, 99 decodes), about 10 are running at any time.
STEADY: dict[str, Any] = {
    "seed": 5,
    "workload": {
        "num_requests": 60,
        "arrival": {"name": "constant", "rate_per_s": 10.0},
        "input_tokens": {"name": "fixed", "tokens": 10},
        "output_tokens": {"name": "fixed", "tokens": 100},
    },
    "scheduler": {"name": "continuous", "max_num_seqs": 64, "max_num_batched_tokens": 4096},
    "kv_cache": {"block_size": 16, "num_blocks": 4096},
    "cost": {"name": "linear", "base_ms": 10.0, "per_seq_ms": 0.0},
}


def make(base: dict[str, Any] = STEADY, **changes: Any) -> dict[str, Any]:
    raw = copy.deepcopy(base)
    for path, value in changes.items():
        set_path(raw, path.replace("__", "."), value)
    return raw


def run(raw: dict[str, Any], **changes: Any) -> Any:
    return simulate(scenario_from_dict(make(raw, **changes)))


def outage(replica: int, at_s: float, for_s: float) -> dict[str, Any]:
    return {"faults": {"schedule": [{"replica": replica, "at_s": at_s, "for_s": for_s}]}}


# -- failures ----------------------------------------------------------------------------


def test_availability_of_a_fixed_schedule_is_what_hand_arithmetic_gives():
    # 2 replicas for 10 s; replica 0 down [2, 5), replica 1 down [4, 4.5) and [6, 7)
    raw = make(
        cluster={"replicas": 2},
        simulation={"until_s": 10.0},
        processes={
            "faults": {
                "schedule": [
                    {"replica": 0, "at_s": 2.0, "for_s": 3.0},
                    {"replica": 1, "at_s": 4.0, "for_s": 0.5},
                    {"replica": 1, "at_s": 6.0, "for_s": 1.0},
                ]
            }
        },
    )
    res = run(raw)
    s = res.summary
    assert res.engine["end_s"] == 10.0
    assert s["availability"] == pytest.approx(1 - 4.5 / 20.0, rel=1e-12)
    assert s["replica_hours"] == pytest.approx(20.0 / 3600.0, rel=1e-12)
    assert s["mean_replicas_serving"] == pytest.approx((20.0 - 4.5) / 10.0, rel=1e-12)
    t = res.replicas
    assert t["time_s"].tolist() == [0.0, 0.0, 2.0, 4.0, 4.5, 5.0, 6.0, 7.0]
    assert [STATES[c] for c in t["state"]] == [
        "serving", "serving", "down", "down", "serving", "serving", "down", "serving"
    ]  # fmt: skip
    assert t["serving"].tolist() == [1, 2, 1, 0, 1, 2, 1, 2]


def test_without_processes_the_cluster_keys_are_there_and_trivial():
    res = run(STEADY)
    s = res.summary
    assert (s["failed"], s["retried"], s["goodput_lost_to_failures"]) == (0, 0, 0.0)
    assert s["failed_replica_failure"] == s["failed_no_replica"] == 0
    assert s["availability"] == 1.0
    assert s["mean_replicas_serving"] == 1.0
    assert s["replica_hours"] == pytest.approx(res.engine["end_s"] / 3600.0)
    assert res.replicas == {}
    # over no time: None, never 0 (DESIGN §4)
    assert state_summary([0.0], [0], ["serving"], 1, 0.0)["availability"] is None
    assert state_summary([0.0], [0], ["off"], 1, 5.0)["availability"] is None


def _in_flight(at_s: float) -> np.ndarray:
    """Requests in the replica at *at_s* in a run the failure never reaches (before it,
    both runs are the same run)."""
    late = run(STEADY, processes=outage(0, 1000.0, 1.0)).records
    assert (late["status"] == "ok").all()
    return (late["arrival_s"] <= at_s) & (late["finish_s"] > at_s)


def test_requests_in_flight_at_a_failure_fail_with_their_reason():
    hit = _in_flight(2.05)
    assert hit.sum() == 10  # arrivals 1.1 … 2.0 (1.0's ends at ~2.01)
    res = run(STEADY, processes=outage(0, 2.05, 1.0))
    rec = res.records
    failed = rec["status"] == "failed"
    np.testing.assert_array_equal(failed, hit)  # they had streamed: no retry (Envoy)
    assert set(rec["reject_reason"][failed]) == {"replica_failure"}
    assert (rec["replica"][failed] == 0).all()
    assert np.isnan(rec["finish_s"][failed]).all()
    assert (rec["first_token_s"][failed] < 2.05).all()  # the tokens they streamed stay
    assert (rec["status"][~failed] == "ok").all()
    # arrivals while it was down waited at the router and were served after the repair
    waited = (rec["arrival_s"] > 2.05) & (rec["arrival_s"] < 3.05)
    assert waited.sum() == 10
    assert (rec["first_token_s"][waited] > 3.05).all()
    s = res.summary
    assert (s["failed"], s["failed_replica_failure"], s["retried"]) == (10, 10, 0)
    assert s["goodput_lost_to_failures"] == pytest.approx(10 / s["duration"])
    assert refusals_line("x", s) == "x: failed 10 of 60 requests: replica_failure 10"


def test_requests_in_flight_are_retried_once_when_streams_may_restart():
    hit = _in_flight(2.05)
    res = run(
        STEADY,
        processes=outage(0, 2.05, 1.0),
        cluster={"replicas": 1, "failover": {"max_retries": 1, "retry_streaming": True}},
    )
    rec = res.records
    assert (rec["status"] == "ok").all()
    assert res.summary["retried"] == int(hit.sum()) == 10
    # their streams started over after the repair: the first token of the retry
    assert (rec["first_token_s"][hit] > 3.05).all()
    assert line_has(refusals_line("x", res.summary), "10 retries after replica failures")
    # no retry allowed: they fail
    none = run(
        STEADY,
        processes=outage(0, 2.05, 1.0),
        cluster={"replicas": 1, "failover": {"max_retries": 0, "retry_streaming": True}},
    )
    np.testing.assert_array_equal(none.records["status"] == "failed", hit)


def line_has(line: str | None, text: str) -> bool:
    return line is not None and text in line


def test_a_retry_goes_to_another_replica_and_queued_requests_are_retried():
    # two replicas, one slot each: a failure finds one request running and the
    # requests queued behind it (not streamed: retried even without retry_streaming)
    raw = make(
        **{"scheduler.max_num_seqs": 1, "workload.num_requests": 20},
        cluster={"replicas": 2, "router": {"name": "round_robin"}},
        processes=outage(0, 1.5, 100.0),
    )
    res = run(raw)
    rec = res.records
    on0 = (rec["replica"] == 0) & (rec["status"] != "ok")
    assert (rec["status"][rec["status"] != "ok"] == "failed").all()
    assert on0.sum() == 1  # the one decoding on replica 0
    assert res.summary["retried"] > 0
    retried = res.summary["retried"]
    # each retried request ended on replica 1
    late = run(raw, processes=outage(0, 1000.0, 1.0)).records
    moved = (late["replica"] == 0) & (rec["replica"] == 1)
    assert moved.sum() >= retried
    assert (rec["status"] != "unfinished").all()


def test_no_replica_timeout_fails_the_requests_that_waited_too_long():
    # down from 2.05 to 4.05; a request waits 0.52 s for a replica, then fails
    res = run(
        STEADY,
        processes=outage(0, 2.05, 2.0),
        cluster={"replicas": 1, "failover": {"no_replica_timeout_s": 0.52}},
    )
    rec = res.records
    arrival = rec["arrival_s"]
    no_replica = rec["reject_reason"] == "no_replica"
    # arrivals 2.1 … 3.5 gave up before 4.05; 3.6 … 4.0 were still waiting
    expect = (arrival > 2.05) & (arrival + 0.52 < 4.05)
    np.testing.assert_array_equal(no_replica, expect)
    assert expect.sum() == 15
    assert (rec["status"][no_replica] == "failed").all()
    assert (rec["replica"][no_replica] == -1).all()
    assert res.summary["failed_no_replica"] == 15
    waited = (arrival > 3.55) & (arrival < 4.05)
    assert (rec["status"][waited] == "ok").all()


def _never_back(env: Any, cluster: Cluster, config: Any) -> Process:
    yield cluster.wait_until(config.at_s)
    cluster.take_down(0)


def test_requests_still_waiting_when_nothing_is_left_to_happen_fail(monkeypatch):
    monkeypatch.setitem(PROCESSES, "load_spike", _never_back)
    raw = make(processes={"load_spike": {"at_s": 2.05, "for_s": 1.0, "factor": 1.0}})
    rec = run(raw).records
    assert ((rec["arrival_s"] > 2.05) == (rec["reject_reason"] == "no_replica")).all()
    # cut by until_s they are unfinished instead
    rec = run(raw, simulation={"until_s": 5.0}).records
    waiting = rec["arrival_s"] > 2.05
    assert (rec["status"][waiting] == "unfinished").all()


def test_a_failed_replica_comes_back_with_a_cold_prefix_cache():
    shared = make(
        prefix_cache={"name": "radix"},
        **{"workload.prefix": {"name": "system_prompt", "groups": 1, "prefix_tokens": 64}},
        **{"workload.input_tokens": {"name": "fixed", "tokens": 80}},
    )
    warm = run(shared, processes=outage(0, 1000.0, 1.0)).records
    cold = run(shared, processes=outage(0, 2.05, 0.5)).records
    # the requests that waited for the repair start together on an empty cache ...
    held = (warm["arrival_s"] > 2.05) & (warm["arrival_s"] < 2.55)
    assert held.sum() == 5
    assert (warm["cached_tokens"][held] == 64).all()
    assert (cold["cached_tokens"][held] == 0).all()
    # ... which holds the prompt again for those that come after them
    assert (cold["cached_tokens"][warm["arrival_s"] > 2.6] == 64).all()


# -- the autoscaler ----------------------------------------------------------------------

#: Requests that never finish within the test (running = arrivals so far), one a second.
CLIMB = make(
    **{
        "workload.num_requests": 9,
        "workload.arrival": {"name": "constant", "rate_per_s": 1.0},
        "workload.output_tokens": {"name": "fixed", "tokens": 3000},
    },
    simulation={"until_s": 12.0},
    processes={
        "autoscaler": {
            "min_replicas": 1, "max_replicas": 4, "signal": "running", "target": 2.0,
            "interval_s": 1.0, "tolerance": 0.0, "startup_s": 0.5,
        }
    },
)  # fmt: skip


def test_autoscaler_replicas_over_a_steady_climb_are_the_hpa_rule():
    # at each whole second t the running requests are those that arrived before t
    # (t of them): desired = ceil(t / 2) → 2 at t = 3, 3 at t = 5, 4 at t = 7; each
    # serves 0.5 s later
    res = run(CLIMB)
    t = res.replicas
    starts = [(time, STATES[s]) for time, s in zip(t["time_s"], t["state"], strict=True)]
    assert starts[4:] == [
        (3.0, "starting"), (3.5, "serving"), (5.0, "starting"), (5.5, "serving"),
        (7.0, "starting"), (7.5, "serving"),
    ]  # fmt: skip
    assert t["serving"][-1] == 4
    # replica-hours: 12 s + 8.5 + 6.5 + 4.5 (starting counts: it is paid for)
    assert res.summary["replica_hours"] == pytest.approx((12 + 9 + 7 + 5) / 3600)
    assert res.summary["mean_replicas_serving"] == pytest.approx((12 + 8.5 + 6.5 + 4.5) / 12)


def test_autoscaler_drains_after_the_cooldown_and_loses_nothing():
    raw = make(
        cluster={"replicas": 4},
        processes={
            "autoscaler": {
                "min_replicas": 1, "max_replicas": 4, "signal": "running", "target": 20.0,
                "interval_s": 1.0, "cooldown_s": 2.5,
            }
        },
    )  # fmt: skip
    res = run(raw)
    assert (res.records["status"] == "ok").all()
    t = res.replicas
    changes = [
        (time, int(r), STATES[s])
        for time, r, s in zip(t["time_s"], t["replica"], t["state"], strict=True)
    ]
    # ~10 requests run: desired 1; the first evaluation after 2.5 s (t = 3) drains three
    drains = [c for c in changes if c[2] == "draining"]
    assert [c[0] for c in drains] == [3.0, 3.0, 3.0]
    off = [c for c in changes if c[2] == "off"]
    assert len(off) == 3
    assert all(time >= 3.0 for time, _, _ in off)
    assert res.summary["retried"] == res.summary["failed"] == 0


class _Stub:
    """What the autoscaler reads of a cluster, with *running(t)* requests in flight
    spread over the serving replicas."""

    def __init__(self, env: Any, n: int, running: Any) -> None:
        self.env, self.running = env, running
        self.states = ["serving"] * n
        self.log: list[tuple[float, str, int]] = []

    @property
    def now_s(self) -> float:
        return float(self.env.now)

    def wait(self, delay_s: float) -> Any:
        return self.env.timeout(delay_s)

    def replicas(self) -> list[ReplicaStatus]:
        up = self.states.count("serving")
        share = self.running(self.now_s) / max(up, 1)
        return [ReplicaStatus(i, s, 0, int(share) if s == "serving" else 0, 0, 100)
                for i, s in enumerate(self.states)]  # fmt: skip

    def waiting_for_replica(self) -> int:
        return 0

    def drain(self, i: int) -> bool:
        self.states[i] = "off"
        self.log.append((self.now_s, "drain", i))
        return True

    def add_replica(self, startup_s: float = 0.0) -> int | None:
        i = self.states.index("off")
        self.states[i] = "serving"
        self.log.append((self.now_s, "add", i))
        return i


def test_a_dip_inside_the_stabilization_window_drains_nothing():
    import simpy

    from lyra_simpy.processes.autoscaler import autoscale

    env = simpy.Environment()
    # 40 in flight (4 replicas at target 10), a dip to 5 at t = 5 only, then 5 from t = 10
    stub = _Stub(env, 4, lambda t: 5 if t == 5 or t >= 10 else 40)
    cfg = AutoscalerConfig(max_replicas=4, signal="running", target=10.0, interval_s=1.0,
                           cooldown_s=3.0, tolerance=0.0)  # fmt: skip
    env.process(autoscale(env, stub, cfg))  # type: ignore[arg-type]
    env.run(until=20)
    # the recommendation of 1 at t = 5 is outvoted by the 4s of the window [2, 5]; from
    # t = 10 every recommendation is 1, and at t = 13 the window [10, 13] holds no other
    assert stub.log == [(13.0, "drain", 3), (13.0, "drain", 2), (13.0, "drain", 1)]


def test_desired_replicas_follows_the_signal():
    cfg = AutoscalerConfig(max_replicas=8, target=4.0, signal="queue")
    up = [ReplicaStatus(i, "serving", 10, 1, 5, 100) for i in range(2)]
    assert desired_replicas(cfg, up, 0) == 5  # ceil(20 / 4)
    assert desired_replicas(cfg, up, 20) == 8  # + 20 held at the router, capped
    steady = [ReplicaStatus(i, "serving", 4, 1, 5, 100) for i in range(2)]
    assert desired_replicas(cfg, steady, 0) == 2  # within tolerance
    both = AutoscalerConfig(max_replicas=8, target=4.0, signal="concurrency")
    assert desired_replicas(both, steady, 0) == 3  # ceil(2 × (4 + 1) / 4)
    assert desired_replicas(both, steady, 6) == 4
    kv = AutoscalerConfig(max_replicas=8, target=0.5, signal="kv")
    assert desired_replicas(kv, [ReplicaStatus(0, "serving", 0, 0, 90, 100)], 0) == 2
    assert desired_replicas(kv, [ReplicaStatus(0, "down", 0, 0, 90, 100)], 0) == 1


# -- load that changes -------------------------------------------------------------------


def test_load_spike_moves_the_arrivals_exactly():
    # constant 1 req/s (times 0, 1, 2, …); from 4 s, twice as fast, for 2 s; then 1/s
    raw = make(
        **{"workload.arrival": {"name": "constant", "rate_per_s": 1.0}},
        **{"workload.num_requests": 12, "workload.output_tokens": {"name": "fixed", "tokens": 2}},
        processes={"load_spike": {"at_s": 4.0, "for_s": 2.0, "factor": 2.0}},
    )
    arrivals = run(raw).records["arrival_s"].tolist()
    assert arrivals == [0, 1, 2, 3, 4, 4.5, 5, 5.5, 6, 7, 8, 9]


def test_load_spike_leaves_a_request_on_its_way_where_it_was_sent():
    # the request sent at 4 s is still on its 300 ms request path when the spike starts
    # at 4.1 s: the client's sends are the same with a path as without one
    def sends(path_ms: float) -> list[float]:
        raw = make(
            **{"workload.arrival": {"name": "constant", "rate_per_s": 1.0}},
            **{"workload.num_requests": 12, "workload.request_path_ms": path_ms},
            **{"workload.output_tokens": {"name": "fixed", "tokens": 2}},
            processes={"load_spike": {"at_s": 4.1, "for_s": 2.0, "factor": 2.0}},
        )
        out: list[float] = run(raw).records["arrival_s"].tolist()
        return out

    with_path = sends(300.0)
    assert with_path[4] == 4.0
    assert with_path == sends(0.0)


def test_scale_arrivals_refuses_a_closed_loop(monkeypatch):
    raw = make(
        **{"workload.arrival": {"name": "closed_loop", "concurrency": 2}},
        processes={"load_spike": {"at_s": 0.5, "for_s": 1.0, "factor": 2.0}},
    )
    with pytest.raises(SimulationError, match="load_spike: scale_arrivals needs an open-loop"):
        run(raw)


# -- the handle and determinism ----------------------------------------------------------


def test_same_seed_same_bytes_with_processes_on(tmp_path: Path):
    raw = make(
        **{"workload.num_requests": 300, "workload.arrival": {"name": "poisson", "rate_per_s": 30}},
        cluster={"replicas": 2, "router": {"name": "least_outstanding"}},
        processes={
            "faults": {"mtbf_s": 3.0, "mttr_s": 0.5},
            "autoscaler": {"max_replicas": 4, "target": 2.0, "interval_s": 0.5, "cooldown_s": 1},
        },
    )
    written = []
    for i in range(2):
        write_variant(run(raw), tmp_path / str(i), None)
        written.append((tmp_path / str(i) / "requests.jsonl").read_bytes())
    assert written[0] == written[1]
    assert (tmp_path / "0" / "replicas.csv").read_bytes() == (
        tmp_path / "1" / "replicas.csv"
    ).read_bytes()
    summary = json.loads((tmp_path / "0" / "summary.json").read_text())
    assert summary["failed"] + summary["retried"] > 0  # the faults did something


def test_handle_errors_name_the_process():
    def bad(env: Any, cluster: Cluster, config: Any) -> Process:
        yield cluster.wait(0.1)
        cluster.take_down(7)

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(PROCESSES, "load_spike", bad)
        raw = make(processes={"spike": {"name": "load_spike", "at_s": 1, "for_s": 1, "factor": 1}})
        with pytest.raises(SimulationError, match=r"spike: replica 7: must be in 0 … 0"):
            run(raw)


# -- bad input: one line naming the field --------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"processes": {"faults": {"mtbf_s": 10.0}}},
            "mttr_s: got None, must be set with the other",
        ),
        (
            {"processes": {"faults": {"mtbf_s": 1, "mttr_s": 1, **outage(0, 1, 1)["faults"]}}},
            "schedule: got outages with mtbf_s/mttr_s, must use one of the two",
        ),
        ({"processes": outage(3, 1.0, 1.0)}, "processes.faults.schedule[0].replica: got 3, must"),
        (
            {"processes": {"autoscaler": {"min_replicas": 3, "max_replicas": 2, "target": 1}}},
            "min_replicas: got 3, must be <= max_replicas (2)",
        ),
        (
            {"processes": {"autoscaler": {"min_replicas": 2, "max_replicas": 4, "target": 1}}},
            "cluster.replicas: got 1 with processes.autoscaler, must be in [min_replicas, "
            "max_replicas] = [2, 4]",
        ),
        ({"processes": {"chaos": {"x": 1}}}, "processes.chaos: got 'chaos', must be one of"),
        (
            {"workload.rate_schedule": {"points": [{"at_s": 1, "factor": 2}]}},
            "points[0].at_s: got 1.0, must be 0",
        ),
        (
            {
                "workload.rate_schedule": {
                    "points": [{"at_s": 0, "factor": 2}, {"at_s": 5, "factor": 0}]
                }
            },
            "points[1].factor: got 0.0, must be > 0",
        ),
        (
            {
                "workload.arrival": {"name": "closed_loop", "concurrency": 2},
                "workload.rate_schedule": {"points": [{"at_s": 0, "factor": 2}]},
            },
            "rate_schedule: got a schedule with arrival closed_loop",
        ),
        (
            {"cluster": {"failover": {"max_retries": -1}}},
            "cluster.failover.max_retries: got -1",
        ),
    ],
)
def test_bad_process_input_is_one_line(changes, expected):
    raw = make(**{k.replace(".", "__"): v for k, v in changes.items()})
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(raw)
    msg = str(info.value)
    assert "\n" not in msg
    assert expected in msg, msg


def test_processes_refuse_a_disaggregated_cluster():
    raw = make(
        cluster={
            "disaggregation": {
                "prefill": {"count": 1},
                "decode": {"count": 1},
                "link": {"bandwidth_gb_s": 10.0, "kv_bytes_per_token": 1000},
            }
        },
        processes=outage(0, 1.0, 1.0),
    )
    expected = r"processes\.faults: got 'faults' with cluster\.disaggregation, must be"
    with pytest.raises(ScenarioError, match=expected):
        scenario_from_dict(raw)


# -- the documented example ----------------------------------------------------------------


def test_the_example_in_docs_extending_runs_as_the_package_s_own(monkeypatch):
    """docs/extending.md's complete process, executed from the page: it registers and
    behaves exactly as the shipped ``load_spike``."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
    section = text.split("## A process of your own", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.strip().splitlines()) <= 30
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/extending.md", "exec"), namespace)
    raw = make(
        **{"workload.arrival": {"name": "constant", "rate_per_s": 1.0}},
        **{"workload.num_requests": 12, "workload.output_tokens": {"name": "fixed", "tokens": 2}},
        processes={"load_spike": {"at_s": 4.0, "for_s": 2.0, "factor": 2.0}},
    )
    shipped = run(raw).records
    monkeypatch.setitem(PROCESSES, "load_spike", namespace["load_spike"])
    documented = run(raw).records
    assert documented["arrival_s"].tolist() == [0, 1, 2, 3, 4, 4.5, 5, 5.5, 6, 7, 8, 9]
    for name in shipped:
        np.testing.assert_array_equal(documented[name], shipped[name])


def test_the_handle_s_state_machine(monkeypatch):
    seen: list[Any] = []

    def script(env: Any, cluster: Cluster, config: Any) -> Process:
        yield cluster.wait(0.5)
        seen.append(cluster.bring_up(0))  # not down: nothing happens
        i = cluster.add_replica(startup_s=2.0)
        seen.append((i, [s.state for s in cluster.replicas()]))
        seen.append(cluster.add_replica())  # no slot left off
        yield cluster.wait(1.0)
        seen.append(cluster.drain(1))  # still starting: off at once, never serves
        seen.append(cluster.drain(1))  # off already
        yield cluster.wait(2.0)  # (its start would have completed by now)
        seen.append([s.state for s in cluster.replicas()])
        seen.append(cluster.take_down(1))  # off: a failure does nothing
        seen.append(cluster.take_down(0))
        seen.append(cluster.take_down(0))  # down already
        seen.append(cluster.waiting_for_replica())
        yield cluster.wait(0.5)
        seen.append(cluster.waiting_for_replica())  # arrivals held while none serves
        seen.append(cluster.bring_up(0))

    monkeypatch.setitem(PROCESSES, "load_spike", script)
    raw = make(
        processes={
            "load_spike": {"at_s": 0, "for_s": 1, "factor": 1},
            "autoscaler": {"max_replicas": 2, "target": 1e9, "interval_s": 1e6},
        }
    )
    res = run(raw)
    assert seen == [
        False, (1, ["serving", "starting"]), None, True, False, ["serving", "off"], False,
        True, False, 0, 5, True,
    ]  # fmt: skip
    assert 1 not in res.records["replica"].tolist()  # replica 1 never served
    table = res.replicas
    assert [STATES[s] for s in table["state"][table["replica"] == 1]] == ["off", "starting", "off"]
