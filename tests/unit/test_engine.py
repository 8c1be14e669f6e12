"""End-to-end timing of tiny runs, computed by hand (the engine's semantics, DESIGN §3)."""

from __future__ import annotations

import numpy as np
import pytest

from builders import trace_workload
from lyra_simpy import simulate
from lyra_simpy.engine.timing import exact_delay


def one_request(make_scenario, **changes):
    base = {
        "workload.num_requests": 1,
        "workload.input_tokens": {"name": "fixed", "tokens": 10},
        "workload.output_tokens": {"name": "fixed", "tokens": 5},
        "cost": {"name": "linear", "base_ms": 10, "per_seq_ms": 1},
    }
    base.update(changes)
    return simulate(make_scenario(base))


def test_single_request_prefill_then_decodes(make_scenario):
    res = one_request(make_scenario)
    (r,) = res.requests()
    # prefill: 10 + 1 ms emits token 1; 4 decodes of 11 ms emit the rest
    assert r["status"] == "ok"
    assert r["ttft_ms"] == pytest.approx(11.0)
    assert r["e2el_ms"] == pytest.approx(55.0)
    assert r["tpot_ms"] == pytest.approx(11.0)
    assert res.engine["iterations"] == 5
    assert res.summary["mean_itl_ms"] == pytest.approx(11.0)
    assert res.itl_s[1].sum() == 4


def test_decode_padded_to_max_batch(make_scenario):
    res = one_request(
        make_scenario,
        cost={"name": "linear", "base_ms": 10, "per_seq_ms": 1, "padding": "max_batch"},
    )
    (r,) = res.requests()
    # max_num_seqs 4: decode iterations cost 10 + 4 ms; the prefill is not padded
    assert r["ttft_ms"] == pytest.approx(11.0)
    assert r["e2el_ms"] == pytest.approx(11.0 + 4 * 14.0)
    assert r["tpot_ms"] == pytest.approx(14.0)


def test_prefill_token_and_context_costs(make_scenario):
    res = one_request(
        make_scenario,
        cost={
            "name": "linear",
            "base_ms": 1,
            "per_prefill_token_ms": 0.5,
            "per_context_token_ms": 0.1,
        },
    )
    (r,) = res.requests()
    # prefill 1 + 0.5 × 10 = 6 ms; decode j reads 10 + j tokens: 1 + 0.1 × (11, 12, 13, 14)
    assert r["ttft_ms"] == pytest.approx(6.0)
    assert r["e2el_ms"] == pytest.approx(6.0 + 4 * 1 + 0.1 * (11 + 12 + 13 + 14))


def test_timeseries_rows_of_a_single_request(make_scenario):
    res = one_request(make_scenario, **{"kv_cache.block_size": 4})
    ts = res.timeseries
    np.testing.assert_array_equal(ts["batch_seqs"], [1] * 5)
    np.testing.assert_array_equal(ts["prefill_tokens"], [10, 0, 0, 0, 0])
    np.testing.assert_array_equal(ts["decode_seqs"], [0, 1, 1, 1, 1])
    # 10 prompt tokens → 3 blocks of 4; decode j holds 10 + j tokens: 11, 12 → 3; 13, 14 → 4
    np.testing.assert_array_equal(ts["kv_blocks"], [3, 3, 3, 4, 4])
    np.testing.assert_allclose(ts["end_s"], np.cumsum([0.011] * 5))
    assert res.engine["peak_kv_blocks"] == 4


@pytest.mark.parametrize(("name", "r2_e2el_ms"), [("static", 12 + 5 * 12), ("continuous", 68)])
def test_static_batch_holds_rows_until_its_longest_member_ends(
    make_scenario, tmp_path, name, r2_e2el_ms
):
    scheduler = (
        {"name": "static", "max_batch": 2}
        if name == "static"
        else {"name": "continuous", "max_num_seqs": 2, "max_num_batched_tokens": 64}
    )
    sc = make_scenario(
        {
            **trace_workload(tmp_path, [(0.0, 10, 2), (0.0, 10, 6)]),
            "scheduler": scheduler,
            "cost": {"name": "linear", "base_ms": 10, "per_seq_ms": 1},
        },
        base_dir=tmp_path,
    )
    r1, r2 = simulate(sc).requests()
    # both prefill together: 10 + 2 ms; then decodes of 12 ms while both run
    assert r1["e2el_ms"] == pytest.approx(24.0)
    # static keeps charging 2 rows after r1 ends; continuous drops to 11 ms
    assert r2["e2el_ms"] == pytest.approx(r2_e2el_ms)


def test_static_max_wait_starts_partial_batches(make_scenario):
    sc = make_scenario(
        {
            "workload.num_requests": 3,
            "workload.arrival": {"name": "constant", "rate_per_s": 1.0},
            "workload.output_tokens": {"name": "fixed", "tokens": 1},
            "workload.input_tokens": {"name": "fixed", "tokens": 8},
            "scheduler": {"name": "static", "max_batch": 4, "max_wait_ms": 250},
            "cost": {"name": "linear", "base_ms": 10, "per_seq_ms": 1},
        }
    )
    res = simulate(sc)
    # each request waits 250 ms for company, then runs alone in an 11 ms prefill, except
    # the last: no arrival is pending after it, so it starts at once
    np.testing.assert_allclose(res.records["ttft_ms"], [261.0, 261.0, 11.0])


def test_static_waits_for_a_full_batch_without_max_wait(make_scenario):
    sc = make_scenario(
        {
            "workload.num_requests": 5,
            "workload.arrival": {"name": "constant", "rate_per_s": 10.0},
            "workload.output_tokens": {"name": "fixed", "tokens": 1},
            "scheduler": {"name": "static", "max_batch": 2},
            "cost": {"name": "linear", "base_ms": 10, "per_seq_ms": 0},
        }
    )
    res = simulate(sc)
    # batches start at 0.1 ({0,1}), 0.3 ({2,3}) and, nothing pending after it, 0.4 ({4})
    np.testing.assert_allclose(res.records["first_token_s"], [0.11, 0.11, 0.31, 0.31, 0.41])


def test_arrival_mid_iteration_waits_for_the_boundary(make_scenario):
    sc = make_scenario(
        {
            "workload.num_requests": 2,
            "workload.arrival": {"name": "constant", "rate_per_s": 200.0},  # 0 and 5 ms
            "workload.output_tokens": {"name": "fixed", "tokens": 1},
            "cost": {"name": "linear", "base_ms": 20, "per_seq_ms": 0},
        }
    )
    res = simulate(sc)
    # request 1 arrives during request 0's prefill (0-20 ms) and starts at 20 ms
    np.testing.assert_allclose(res.records["first_token_s"], [0.020, 0.040])
    np.testing.assert_allclose(res.records["ttft_ms"], [20.0, 35.0])


def test_oversized_requests_are_rejected_on_arrival(make_scenario):
    sc = make_scenario(
        {
            "workload.num_requests": 6,
            "workload.input_tokens": {"name": "uniform", "low": 1, "high": 100},
            "workload.output_tokens": {"name": "fixed", "tokens": 1},
            "scheduler.max_num_batched_tokens": 50,
        }
    )
    res = simulate(sc)
    rec = res.records
    big = rec["input_tokens"] > 50
    assert big.any()
    assert (~big).any()
    assert (rec["status"][big] == "rejected").all()
    assert (rec["status"][~big] == "ok").all()
    for r in res.requests():
        if r["status"] == "rejected":
            assert r["first_token_s"] is None
            assert r["finish_s"] is None
            assert r["ttft_ms"] is None
            assert r["tpot_ms"] is None


@pytest.mark.parametrize(
    ("now", "target"), [(0.1, 0.30000000000000004), (1e6, 1e6 + 0.1), (3.3, 3.3), (0.0, 1e-300)]
)
def test_exact_delay_lands_on_target(now, target):
    assert now + exact_delay(now, target) == target
