"""Jain's index, unloaded service time and slowdown statistics (hand-computed cases)."""

from __future__ import annotations

import numpy as np
import pytest

from lyra_simpy import scenario_from_dict, simulate
from lyra_simpy.cost import LinearCost, LinearCostConfig
from lyra_simpy.metrics.fairness import (
    fairness_summary,
    jain_index,
    prefill_alone_s,
    unloaded_service_s,
)


def test_jain_index_hand_computed():
    assert jain_index([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    # (1 + 2 + 3)² / (3 × (1 + 4 + 9)) = 36 / 42
    assert jain_index([1.0, 2.0, 3.0]) == pytest.approx(36 / 42)
    # one request takes everything: 1/n
    assert jain_index([0.0, 0.0, 0.0, 5.0]) == pytest.approx(0.25)
    assert jain_index([]) == 0.0
    assert jain_index([0.0, 0.0]) == 0.0


def linear(**kw: float) -> LinearCost:
    return LinearCost(LinearCostConfig(**kw), max_batch=8)


def test_unloaded_service_time_linear_hand_computed():
    cost = linear(base_ms=10, per_seq_ms=1, per_prefill_token_ms=0.1, per_context_token_ms=0.01)
    # prompt 100, output 4: prefill 10 + 1 + 0.1 × 100 = 21 ms; then 3 decodes at one row
    # with contexts 101, 102, 103: 3 × 11 + 0.01 × 306 = 36.06 ms; total 57.06 ms.
    # prompt 20, output 1: the prefill only, 10 + 1 + 2 = 13 ms.
    got = unloaded_service_s(cost, np.array([100, 20]), np.array([4, 1]))
    np.testing.assert_allclose(got, [0.05706, 0.013], rtol=1e-12)


def test_unloaded_service_time_with_padding_charges_the_padded_row():
    cost = LinearCost(LinearCostConfig(base_ms=15, per_seq_ms=1, padding="max_batch"), 16)
    # prefill 16 ms (mixed/prefill iterations are not padded), 9 decodes at 15 + 16 ms
    got = unloaded_service_s(cost, np.array([64]), np.array([10]))
    assert got[0] == pytest.approx((16 + 9 * 31) / 1000)


def test_prefill_split_into_chunks_of_the_budget():
    cost = linear(base_ms=10, per_prefill_token_ms=0.1)
    assert prefill_alone_s(cost, 250, None) == pytest.approx(0.035)
    # chunks 100, 100, 50: three base costs
    assert prefill_alone_s(cost, 250, 100) == pytest.approx(0.055)
    assert prefill_alone_s(cost, 100, 100) == pytest.approx(0.020)


def test_unloaded_matches_a_lone_request_in_the_engine():
    raw = {
        "seed": 3,
        "workload": {
            "num_requests": 30,
            # one at a time: each finishes long before the next arrives
            "arrival": {"name": "constant", "rate_per_s": 0.2},
            "input_tokens": {"name": "uniform", "low": 1, "high": 900},
            "output_tokens": {"name": "uniform", "low": 1, "high": 300},
        },
        "scheduler": {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 2048},
        "kv_cache": {"block_size": 16, "num_blocks": 4000},
        "cost": {
            "name": "linear",
            "base_ms": 7,
            "per_seq_ms": 0.3,
            "per_prefill_token_ms": 0.09,
            "per_context_token_ms": 0.00026,
            "padding": [1, 2, 4],
        },
    }
    res = simulate(scenario_from_dict(raw))
    s = res.summary
    assert s["completed"] == 30
    assert s["mean_slowdown"] == pytest.approx(1.0, rel=1e-9)
    assert s["max_slowdown"] == pytest.approx(1.0, rel=1e-9)
    assert s["fairness_jain_slowdown"] == pytest.approx(1.0, rel=1e-12)


def test_fairness_summary_keys_and_statuses():
    records = {
        "status": np.array(["ok", "ok", "rejected", "ok"], dtype=object),
        "e2el_ms": np.array([20.0, 40.0, np.nan, 10.0]),
    }
    unloaded = np.array([0.01, 0.01, 0.01, 0.0])  # the last has no unloaded time
    s = fairness_summary(records, unloaded)
    assert list(s) == [
        "fairness_jain_slowdown",
        "mean_slowdown",
        "median_slowdown",
        "p90_slowdown",
        "p99_slowdown",
        "max_slowdown",
    ]
    assert s["mean_slowdown"] == pytest.approx(3.0)
    assert s["max_slowdown"] == pytest.approx(4.0)
    assert s["fairness_jain_slowdown"] == pytest.approx(36 / 40)
    empty = fairness_summary({k: v[2:3] for k, v in records.items()}, unloaded[2:3])
    assert set(empty.values()) == {None}
