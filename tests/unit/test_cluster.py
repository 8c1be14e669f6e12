"""Routers on hand-built loads; clusters and disaggregation end to end, timed by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builders import routers_reading_state, runs_carried, trace_workload
from lyra_simpy import simulate
from lyra_simpy.cluster.routing import (
    CacheAware,
    CacheAwareConfig,
    LeastKV,
    LeastKVConfig,
    LeastOutstanding,
    LeastOutstandingConfig,
    PowerOfTwo,
    PowerOfTwoConfig,
    ReplicaLoad,
    RoundRobin,
    RoundRobinConfig,
)
from lyra_simpy.engine.request import Request
from lyra_simpy.errors import ScenarioError

RNG = np.random.default_rng(0)


def loads(*outstanding: int, free: tuple[int, ...] | None = None) -> list[ReplicaLoad]:
    free = free or (100,) * len(outstanding)
    return [ReplicaLoad(o, f, 100) for o, f in zip(outstanding, free, strict=True)]


def req(keys=()) -> Request:
    r = Request(0, 0, 0.0, 10, 5)
    r.keys = tuple(keys)
    return r


def test_round_robin_cycles():
    rr = RoundRobin(RoundRobinConfig(), 3, RNG)
    assert [rr.route(req(), loads(0, 0, 0)) for _ in range(5)] == [0, 1, 2, 0, 1]


def test_least_outstanding_and_least_kv_break_ties_to_the_lowest_index():
    lo = LeastOutstanding(LeastOutstandingConfig(), 3, RNG)
    assert lo.route(req(), loads(3, 1, 1)) == 1
    lk = LeastKV(LeastKVConfig(), 3, RNG)
    assert lk.route(req(), loads(0, 0, 0, free=(10, 50, 50))) == 1


def test_power_of_two_takes_the_less_loaded_of_its_two_draws():
    p2 = PowerOfTwo(PowerOfTwoConfig(), 4, np.random.default_rng(3))
    draws = np.random.default_rng(3)
    for _ in range(20):
        a, b = draws.choice(4, size=2, replace=False)
        load = loads(5, 1, 3, 0)
        want = a if (load[a].outstanding, a) <= (load[b].outstanding, b) else b
        assert p2.route(req(), load) == want


def test_cache_aware_follows_the_prefix_unless_load_is_imbalanced():
    ca = CacheAware(CacheAwareConfig(), 3, RNG)
    # no prefix known anywhere: the smallest record (all empty: replica 0)
    assert ca.route(req([1, 2, 3, 4]), loads(0, 0, 0)) == 0
    # same prefix: follows it although replica 0 is busier (imbalance under thresholds)
    assert ca.route(req([1, 2, 3, 9]), loads(5, 0, 0)) == 0
    # a different prompt goes to the replica with the smallest record
    assert ca.route(req([7, 8]), loads(5, 0, 0)) == 1
    # a match below cache_threshold (1 of 4 = 0.25 < 0.3) does not count
    assert ca.route(req([1, 5, 6, 7]), loads(5, 5, 0)) == 2
    # imbalance (max − min > 64 and max > 1.5 × min): least loaded, prefix or not
    assert ca.route(req([1, 2, 3, 4]), loads(100, 10, 20)) == 1


def test_cache_aware_forgets_least_recent_units_past_max_tree_units():
    ca = CacheAware(CacheAwareConfig(max_tree_units=2), 2, RNG)
    ca.route(req([1, 2, 3]), loads(0, 0))  # remembers 2, 3 on replica 0
    assert ca.route(req([1, 2, 3]), loads(0, 0)) == 1  # key 1 forgotten: no match


def pd_scenario(make_scenario, tmp_path: Path, rows=((0, 1000, 3),), **changes):
    raw = {
        **trace_workload(tmp_path, rows),
        "scheduler": {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 2048},
        "kv_cache": {"block_size": 16, "num_blocks": 200},
        "cost": {"name": "linear", "base_ms": 10, "per_prefill_token_ms": 0.01},
        "cluster": {
            "disaggregation": {
                "prefill": {"count": 1},
                "decode": {"count": 1},
                "link": {"bandwidth_gb_s": 1.0, "latency_ms": 0.5, "kv_bytes_per_token": 1000},
            }
        },
    }
    raw.update(changes)
    return simulate(make_scenario(raw, base_dir=tmp_path))


def test_one_request_through_prefill_link_and_decode_by_hand(make_scenario, tmp_path):
    res = pd_scenario(make_scenario, tmp_path)
    (r,) = res.requests()
    # prefill: 10 + 0.01 × 1000 = 20 ms → first token; KV: 1000 × 1000 B at 1 GB/s = 1 ms
    # + 0.5 ms latency; then two decodes of 10 ms on the decode replica
    assert r["status"] == "ok"
    assert r["ttft_ms"] == pytest.approx(20.0)
    assert r["e2el_ms"] == pytest.approx(20.0 + 1.5 + 10 + 10)
    assert res.summary["mean_kv_transfer_ms"] == pytest.approx(1.5)
    assert res.summary["mean_handoff_wait_ms"] == pytest.approx(0.0)
    assert res.transfers["request_id"].tolist() == [0]
    assert res.transfers["decode_replica"].tolist() == [1]
    assert res.transfers["kv_transfer_ms"].tolist() == pytest.approx([1.5])
    assert res.engine["kv_blocks_used_at_end"] == 0  # both pools freed everything


def test_a_decode_pool_too_small_holds_requests_back_and_loses_none(make_scenario, tmp_path):
    rows = [(i * 0.001, 600, 40) for i in range(8)]
    small_decode = {"count": 1, "kv_cache": {"block_size": 16, "num_blocks": 80}}
    res = pd_scenario(
        make_scenario,
        tmp_path,
        rows,
        **{
            "cluster.disaggregation.decode": small_decode,
            "cluster.disaggregation.link.max_concurrent": 2,
        },
    )
    rec = res.records
    assert (rec["status"] == "ok").all()  # 8 arrivals, 8 completions
    # the decode pool holds 80 blocks = two 600-token requests: the rest wait their turn
    assert res.summary["mean_handoff_wait_ms"] > 0
    assert res.summary["p99_handoff_wait_ms"] > 100
    assert res.engine["kv_blocks_used_at_end"] == 0
    assert res.engine["replicas"][1]["peak_kv_blocks"] == 80  # full, never over
    # ... and the prefill replica keeps their KV meanwhile: its own pool fills up
    assert res.engine["replicas"][0]["peak_kv_blocks"] > 150


def test_every_arrival_ends_once_across_the_cluster(make_scenario):
    res = simulate(
        make_scenario(
            {
                "workload.num_requests": 60,
                "cluster": {"replicas": 3, "router": {"name": "least_outstanding"}},
            }
        )
    )
    rec = res.records
    assert len(rec["status"]) == 60
    assert set(rec["replica"].tolist()) <= {0, 1, 2}
    per = res.engine["replicas"]
    assert sum(x["routed"] for x in per) == 60
    assert sum(x["completed"] for x in per) == res.summary["completed"]


def test_disaggregation_needs_kv_bytes_unless_the_catalog_knows(make_scenario):
    with pytest.raises(ScenarioError, match=r"link\.kv_bytes_per_token: got None"):
        make_scenario(
            {
                "cluster": {
                    "disaggregation": {
                        "prefill": {"count": 1},
                        "decode": {"count": 1},
                        "link": {"bandwidth_gb_s": 10},
                    }
                }
            }
        )


@pytest.mark.parametrize("router", ["round_robin", "random"])
@pytest.mark.parametrize("arrival", ["poisson", "constant"])
def test_routing_ahead_gives_the_same_run_with_far_fewer_events(make_scenario, router, arrival):
    """Round robin and random read no replica state: the dispatcher routes ahead and
    each replica runs until its own next request. Identical results, fewer events."""
    import simpy

    counts = {}
    original = simpy.Environment.step

    def counting(env):
        counts[key] = counts.get(key, 0) + 1
        return original(env)

    sc = make_scenario(
        {
            "workload.num_requests": 120,
            "workload.arrival": {"name": arrival, "rate_per_s": 40.0},
            "cluster": {"replicas": 4, "router": {"name": router}},
        }
    )
    results = {}
    try:
        simpy.Environment.step = counting
        key = "ahead"
        results[key] = simulate(sc)
        key = "at_arrival"
        with routers_reading_state(carry=False):
            results[key] = simulate(sc)
    finally:
        simpy.Environment.step = original
    a, b = results["ahead"], results["at_arrival"]
    for name, values in a.records.items():
        np.testing.assert_array_equal(values, b.records[name], err_msg=name)
    assert a.summary == b.summary
    assert a.engine["replicas"] == b.engine["replicas"]
    assert counts["ahead"] < 0.8 * counts["at_arrival"]


@pytest.mark.parametrize(
    ("router", "cache"),
    [
        ("least_outstanding", None),
        ("least_kv", None),
        ("power_of_two", None),
        ("cache_aware", None),
        ("cache_aware", "block_hash"),
        ("least_kv", "radix"),
    ],
)
def test_fused_runs_carried_across_arrivals_change_nothing(make_scenario, router, cache):
    """A router reading the replicas' state sees each one as stepping it would show it
    while fused runs go on across arrivals (their finishes and KV use read from the
    plan; the replica an arrival goes to ends its run there): identical results to
    runs ending before each arrival and to no fusion at all, with far fewer events."""
    import simpy

    from lyra_simpy.scenario import set_path

    counts: dict[str, int] = {}
    original = simpy.Environment.step

    def counting(env):
        counts[key] = counts.get(key, 0) + 1
        return original(env)

    changes = {
        "workload.num_requests": 240,
        "workload.arrival": {"name": "poisson", "rate_per_s": 60.0},
        "workload.input_tokens": {"name": "uniform", "low": 8, "high": 160},
        "workload.output_tokens": {"name": "uniform", "low": 1, "high": 200},
        "scheduler.max_num_seqs": 16,
        "scheduler.max_num_batched_tokens": 512,
        "kv_cache.num_blocks": 160,
        "cluster": {"replicas": 4, "router": {"name": router}},
    }
    if cache is not None:
        changes["prefix_cache"] = {"name": cache}
        changes["workload.prefix"] = {
            "name": "system_prompt", "groups": 3, "prefix_tokens": 32, "share": 1.0
        }  # fmt: skip
    sc = make_scenario(changes)
    results = {}
    try:
        simpy.Environment.step = counting
        key = "carried"
        results[key] = simulate(sc)
        key = "ended"
        with runs_carried(False):
            results[key] = simulate(sc)
    finally:
        simpy.Environment.step = original
    raw = sc.model_dump()
    set_path(raw, "simulation.fuse_iterations", False)
    results["stepped"] = simulate(type(sc).model_validate(raw))
    a = results["carried"]
    assert a.summary["completed"] == 240
    assert a.summary["total_preemptions"] > 0  # (the KV pool runs out: runs stop there)
    for other in ("ended", "stepped"):
        b = results[other]
        for name, values in a.records.items():
            np.testing.assert_array_equal(values, b.records[name], err_msg=f"{other} {name}")
        for name, values in a.timeseries.items():
            np.testing.assert_array_equal(values, b.timeseries[name], err_msg=f"{other} {name}")
        np.testing.assert_array_equal(a.itl_s[0], b.itl_s[0])
        np.testing.assert_array_equal(a.itl_s[1], b.itl_s[1])
        assert a.summary == b.summary
        assert a.engine == b.engine
    # (runs are short here: the KV pool runs out often; scale.py shows the full gain)
    assert counts["carried"] < 0.9 * counts["ended"]


@pytest.mark.parametrize("router", ["round_robin", "random"])
def test_routing_ahead_changes_nothing_for_static_batches_without_max_wait(make_scenario, router):
    # issue 13 (HYPOTHESIS_PROFILE=thorough): a static batch starts when no further
    # arrival is known; routed ahead, a replica knew that none of the cluster's
    # remaining arrivals was for it and started sooner than when routed at arrival
    sc = make_scenario(
        {
            "workload.num_requests": 3,
            "workload.arrival": {"name": "constant", "rate_per_s": 25.0},
            "scheduler": {"name": "static", "max_batch": 5, "max_wait_ms": None},
            "cost": {"name": "linear", "base_ms": 15.0, "per_seq_ms": 1.0},
            "cluster": {"replicas": 2, "router": {"name": router}},
        }
    )
    ahead = simulate(sc)
    with routers_reading_state():
        at_arrival = simulate(sc)
    for name, values in ahead.records.items():
        np.testing.assert_array_equal(values, at_arrival.records[name], err_msg=name)
    assert ahead.summary == at_arrival.summary


def test_timeout_at_lands_exactly_even_where_no_delay_does(env):
    """A carried run cut short waits from the arrival to its new end; where no float
    delay lands on it from there (a rounding tie), the event is queued at it directly."""
    from lyra_simpy.engine.timing import exact_delay, timeout_at

    now, when = 0.32973171649909216, 1.4393732821539886
    assert exact_delay(now, when) is None
    seen = []

    def proc():
        yield env.timeout(now)
        assert env.now == now
        yield timeout_at(env, when)
        seen.append(env.now)
        yield timeout_at(env, when + 1.0)  # (the ordinary case)
        seen.append(env.now)

    env.process(proc())
    env.run()
    assert seen == [when, when + 1.0]


def test_a_planned_run_tells_the_state_a_router_sees_and_is_cut_where_stepping_stops():
    """Iterations ending by the routing time are committed (their finishers freed);
    the one running holds its blocks; one starting then has not allocated yet."""
    from lyra_simpy.engine.fused import DecodeRun

    run = DecodeRun(0.0, 1.0, [1.0, 2.0, 3.0, 4.0], [3, 3, 2, 2], [10, 11, 9, 9], 9)
    run.done_at, run.done_n, run.done_blocks = [1], [1], [3]  # one frees 3 at t = 2
    assert run.state_at(0.0) == (0, 9)  # before the first allocation
    assert run.state_at(0.5) == (0, 10)
    assert run.state_at(1.0) == (0, 10)  # iteration 0 ended; 1 not yet allocated
    assert run.state_at(1.5) == (0, 11)
    assert run.state_at(2.0) == (1, 8)  # iteration 1 committed: its finisher freed
    assert run.state_at(2.5) == (1, 9)
    assert not run.cut_at(3.5)  # the last iteration runs then: nothing to cut
    assert run.cut_at(2.0)  # ends with iteration 1 (ending at the arrival)
    assert run.ends_s == [1.0, 2.0]
    assert run.done_at == [1]
    assert run.cut_at(0.5)
    assert (run.ends_s, run.kv_blocks, run.done_at) == ([1.0], [10], [])
