"""Closed-loop arrivals: at most *concurrency* in flight; each new request follows an end."""

from __future__ import annotations

import numpy as np
import pytest

from lyra_simpy import simulate


def in_flight_max(arrival: np.ndarray, finish: np.ndarray) -> int:
    """Most requests with arrival <= t < finish at any t (checked at every event time)."""
    ts = np.unique(np.concatenate([arrival, finish]))
    return max(int(((arrival <= t) & (t < finish)).sum()) for t in ts)


@pytest.mark.parametrize(
    ("concurrency", "think_s", "scheduler"),
    [
        (3, 0.0, {"name": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 256}),
        (4, 0.013, {"name": "continuous", "max_num_seqs": 2, "max_num_batched_tokens": 256}),
        (5, 0.002, {"name": "static", "max_batch": 2, "max_wait_ms": 5}),
    ],
)
def test_closed_loop_concurrency_and_think_time(make_scenario, concurrency, think_s, scheduler):
    sc = make_scenario(
        {
            "workload.num_requests": 30,
            "workload.arrival": {
                "name": "closed_loop",
                "concurrency": concurrency,
                "think_time_s": think_s,
            },
            "scheduler": scheduler,
        }
    )
    res = simulate(sc)
    rec = res.records
    assert len(rec["status"]) == 30
    assert (rec["status"] == "ok").all()
    arrival, finish = rec["arrival_s"], rec["finish_s"]
    assert (np.diff(arrival) >= 0).all()
    # the first `concurrency` clients start at 0, nobody else does
    assert (arrival[:concurrency] == 0.0).all()
    assert (arrival[concurrency:] > 0.0).all()
    assert in_flight_max(arrival, finish) == concurrency
    # every later arrival is exactly some earlier request's finish + think time
    ends = finish + think_s
    for t in arrival[concurrency:]:
        assert (ends == t).any()
    # and each finish (but the last `concurrency` ones) starts exactly one new request
    later = np.sort(arrival[concurrency:])
    np.testing.assert_array_equal(later, np.sort(ends)[: len(later)])


def test_closed_loop_stops_at_duration(make_scenario):
    sc = make_scenario(
        {
            "workload.num_requests": 1000,
            "workload.duration_s": 0.5,
            "workload.arrival": {"name": "closed_loop", "concurrency": 2},
        }
    )
    res = simulate(sc)
    rec = res.records
    n = len(rec["status"])
    assert 2 < n < 1000
    assert (rec["arrival_s"] < 0.5).all()
    assert (rec["status"] == "ok").all()


def test_closed_loop_rejection_starts_the_next_request(make_scenario):
    # prompts of 300 tokens can never fit a 256-token budget: each is rejected on
    # arrival and its client sends the next one at once
    sc = make_scenario(
        {
            "workload.num_requests": 5,
            "workload.arrival": {"name": "closed_loop", "concurrency": 1},
            "workload.input_tokens": {"name": "fixed", "tokens": 300},
        }
    )
    res = simulate(sc)
    assert res.records["status"].tolist() == ["rejected"] * 5
    assert res.records["arrival_s"].tolist() == [0.0] * 5
    assert res.summary["rejected"] == 5
    assert res.summary["slo_attainment"] == 0.0


def think0_raw(scheduler: dict) -> dict:
    """Closed loop, 2 clients, no think time; seed 0 draws outputs 3, 2, 1 (checked below),
    and the first request is too long for the replica, so it is rejected at t = 0 and its
    client's next request arrives at t = 0 too."""
    return {
        "seed": 0,
        "workload": {
            "num_requests": 3,
            "arrival": {"name": "closed_loop", "concurrency": 2, "think_time_s": 0.0},
            "input_tokens": {"name": "fixed", "tokens": 1},
            "output_tokens": {"name": "lognormal", "mean": 3, "sigma": 0.8, "max": 48},
        },
        "scheduler": scheduler,
        "kv_cache": {"block_size": 1, "num_blocks": 3},
        "cost": {"name": "linear", "base_ms": 10.0},
    }


STATIC2 = {"name": "static", "max_batch": 2}
CONT_BUDGET2 = {"name": "continuous", "max_num_seqs": 2, "max_num_batched_tokens": 2}


def test_think0_workload_preconditions():
    from lyra_simpy import scenario_from_dict
    from lyra_simpy.rng import Streams
    from lyra_simpy.workload import build_source

    for sched in (STATIC2, CONT_BUDGET2):
        sc = scenario_from_dict(think0_raw(sched))
        src = build_source(sc.workload, Streams(sc.seed), sc.base_dir)
        assert src.output_tokens.tolist() == [3, 2, 1]
    # static needs blocks for 1 + 3 tokens > 3; continuous needs 1 + 3 - 1 > budget 2
    from lyra_simpy.engine.request import Request
    from lyra_simpy.policies import ContinuousBatching, ContinuousConfig, StaticBatching

    big, small = Request(0, 0, 0.0, 1, 3), Request(1, 1, 0.0, 1, 2)
    static = StaticBatching(scenario_from_dict(think0_raw(STATIC2)).scheduler)
    assert static.refusal(big, 3, 1) == "never_fits_kv"
    assert static.refusal(small, 3, 1) is None
    cont = ContinuousBatching(ContinuousConfig(**CONT_BUDGET2))
    assert cont.refusal(big, 3, 1) == "exceeds_token_budget"
    assert cont.refusal(small, 3, 1) is None


def test_closed_loop_think0_rejection_with_static_batching():
    from lyra_simpy import scenario_from_dict

    res = simulate(scenario_from_dict(think0_raw(STATIC2)))
    assert res.records["status"].tolist() == ["rejected", "ok", "ok"]


def test_closed_loop_think0_successor_joins_the_first_iteration():
    from lyra_simpy import scenario_from_dict

    res = simulate(scenario_from_dict(think0_raw(CONT_BUDGET2)))
    rec = res.records
    assert rec["status"].tolist() == ["rejected", "ok", "ok"]
    assert rec["arrival_s"].tolist() == [0.0, 0.0, 0.0]
    # both prompts (1 token each) fit the 2-token budget of the iteration at t = 0
    np.testing.assert_allclose(rec["first_token_s"][1:], [0.010, 0.010])


def test_closed_loop_arrival_before_until_s_is_recorded():
    from lyra_simpy import scenario_from_dict

    raw = {
        "workload": {
            "num_requests": 3,
            "arrival": {"name": "closed_loop", "concurrency": 2, "think_time_s": 0.001},
            "input_tokens": {"name": "fixed", "tokens": 1},
            "output_tokens": {"name": "fixed", "tokens": 2},
        },
        "scheduler": {"name": "continuous", "max_num_seqs": 1, "max_num_batched_tokens": 8},
        "kv_cache": {"block_size": 1, "num_blocks": 8},
        "cost": {"name": "linear", "base_ms": 10.0},
        "simulation": {"until_s": 0.025},
    }
    # request 0 runs 0-20 ms; its client sends request 2 at 21 ms, while request 1 is in
    # its prefill (20-30 ms); the clock stops at 25 ms
    rec = simulate(scenario_from_dict(raw)).records
    assert rec["status"].tolist() == ["ok", "unfinished", "unfinished"]
    np.testing.assert_allclose(rec["arrival_s"], [0.0, 0.0, 0.021])


def write_trace(path, rows):
    path.write_text(
        "arrival_s,input_tokens,output_tokens\n" + "".join(f"{t},{i},{o}\n" for t, i, o in rows)
    )


def test_closed_loop_sends_a_traces_rows_in_order(make_scenario, tmp_path):
    # the trace's times (37 s apart) are not used: the loop times the requests
    rows = [(100.0 + 37 * k, 10 + k, 3 + k) for k in range(12)]
    write_trace(tmp_path / "sent.csv", rows)
    sc = make_scenario(
        {
            "workload.num_requests": 8,
            "workload.arrival": {
                "name": "closed_loop",
                "concurrency": 3,
                "path": str(tmp_path / "sent.csv"),
                "format": "csv",
                "skip_rows": 2,
            },
            "workload.input_tokens": {"name": "trace"},
            "workload.output_tokens": {"name": "trace"},
        }
    )
    rec = simulate(sc).records
    np.testing.assert_array_equal(rec["input_tokens"], [12 + k for k in range(8)])
    np.testing.assert_array_equal(rec["output_tokens"], [5 + k for k in range(8)])
    assert (rec["status"] == "ok").all()
    assert (rec["arrival_s"][:3] == 0.0).all()
    assert rec["arrival_s"].max() < 37.0
    assert in_flight_max(rec["arrival_s"], rec["finish_s"]) == 3


def test_closed_loop_trace_without_num_requests_sends_every_row(make_scenario, tmp_path):
    write_trace(tmp_path / "sent.csv", [(0.0, 7, 2), (0.0, 9, 4), (0.0, 5, 3)])
    sc = make_scenario(
        {
            "workload.num_requests": None,
            "workload.arrival": {
                "name": "closed_loop",
                "concurrency": 2,
                "path": str(tmp_path / "sent.csv"),
                "format": "csv",
            },
            "workload.input_tokens": {"name": "trace"},
            "workload.output_tokens": {"name": "fixed", "tokens": 6},
        }
    )
    rec = simulate(sc).records
    np.testing.assert_array_equal(rec["input_tokens"], [7, 9, 5])
    np.testing.assert_array_equal(rec["output_tokens"], [6, 6, 6])


@pytest.mark.parametrize(
    ("arrival", "lengths", "message"),
    [
        ({"name": "closed_loop", "concurrency": 2}, {"name": "trace"}, "closed_loop' with a path"),
        (
            {"name": "closed_loop", "concurrency": 2, "path": "t.csv", "format": "csv"},
            {"name": "fixed", "tokens": 4},
            "a closed_loop trace gives the lengths",
        ),
    ],
)
def test_closed_loop_trace_bad_input(make_scenario, arrival, lengths, message):
    from lyra_simpy.errors import ScenarioError

    with pytest.raises(ScenarioError, match=message):
        make_scenario(
            {
                "workload.arrival": arrival,
                "workload.input_tokens": lengths,
                "workload.output_tokens": lengths,
            }
        )


def test_closed_loop_trace_skip_rows_past_the_end(make_scenario, tmp_path):
    from lyra_simpy.errors import ScenarioError

    write_trace(tmp_path / "sent.csv", [(0.0, 7, 2), (1.0, 9, 4)])
    loop = {"name": "closed_loop", "concurrency": 2, "path": str(tmp_path / "sent.csv")}
    with pytest.raises(ScenarioError, match=r"skip_rows: got 2, must be < the trace's 2 rows"):
        make_scenario(
            {
                "workload.arrival": {**loop, "format": "csv", "skip_rows": 2},
                "workload.input_tokens": {"name": "trace"},
            }
        )


# -- workload.request_path_ms: the time a request spends outside the engine ---------------


def test_the_request_path_delays_an_open_loop_engine_and_counts_in_ttft(make_scenario):
    base = {"workload.arrival": {"name": "poisson", "rate_per_s": 40.0}}
    plain = simulate(make_scenario(base)).records
    path = simulate(make_scenario({**base, "workload.request_path_ms": 7.0})).records
    # the same sends; the engine runs the same steps 7 ms later, and TTFT and E2E (from
    # the send) count the 7 ms; TPOT does not
    np.testing.assert_array_equal(path["arrival_s"], plain["arrival_s"])
    np.testing.assert_allclose(path["first_token_s"], plain["first_token_s"] + 0.007, atol=1e-9)
    np.testing.assert_allclose(path["ttft_ms"], plain["ttft_ms"] + 7.0, atol=1e-6)
    np.testing.assert_allclose(path["e2el_ms"], plain["e2el_ms"] + 7.0, atol=1e-6)
    np.testing.assert_allclose(path["tpot_ms"], plain["tpot_ms"], atol=1e-6, equal_nan=True)


def test_a_closed_loop_client_waits_out_the_request_path(make_scenario):
    think_s, path_ms = 0.013, 4.0
    arrival = {"name": "closed_loop", "concurrency": 3, "think_time_s": think_s}
    sc = {"workload.num_requests": 30, "workload.arrival": arrival}
    plain = simulate(make_scenario(sc))
    res = simulate(make_scenario({**sc, "workload.request_path_ms": path_ms}))
    rec = res.records
    assert (rec["status"] == "ok").all()
    # a client sends when it has read the last token (+ think time), and the engine
    # takes the request in 4 ms later: every TTFT holds the 4 ms
    assert (rec["arrival_s"][:3] == 0.0).all()
    ends = rec["finish_s"] + think_s
    for t in rec["arrival_s"][3:]:
        assert np.isclose(ends, t, rtol=0, atol=1e-12).any()
    assert (rec["ttft_ms"] >= path_ms).all()
    # each cycle is 4 ms longer, so the clients get through fewer requests a second
    assert res.summary["request_throughput"] < plain.summary["request_throughput"]
    # one client alone: each request is the plain one 4 ms later in every respect
    one = {**sc, "workload.arrival": {**arrival, "concurrency": 1}}
    plain = simulate(make_scenario(one))
    res = simulate(make_scenario({**one, "workload.request_path_ms": path_ms}))
    for key in ("ttft_ms", "e2el_ms"):
        np.testing.assert_allclose(res.records[key], plain.records[key] + path_ms, atol=1e-6)
    cycle_s = np.diff(res.records["arrival_s"]) - np.diff(plain.records["arrival_s"])
    np.testing.assert_allclose(cycle_s, path_ms / 1000.0, atol=1e-9)
