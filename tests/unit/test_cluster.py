"""Routers on hand-built loads; clusters and disaggregation end to end, timed by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builders import routers_reading_state, trace_workload
from lyra_simpy import simulate
from lyra_simpy.errors import ScenarioError
from lyra_simpy.request import Request
from lyra_simpy.routing import (
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
        with routers_reading_state():
            results[key] = simulate(sc)
    finally:
        simpy.Environment.step = original
    a, b = results["ahead"], results["at_arrival"]
    for name, values in a.records.items():
        np.testing.assert_array_equal(values, b.records[name], err_msg=name)
    assert a.summary == b.summary
    assert a.engine["replicas"] == b.engine["replicas"]
    assert counts["ahead"] < 0.8 * counts["at_arrival"]


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
