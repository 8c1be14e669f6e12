"""metrics/summary.py: weighted percentiles and the vLLM-named summary on hand-built records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lyra_simpy.metrics.summary import good_mask, summarize, weighted_percentile


@given(
    values=st.lists(
        st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False), min_size=1, max_size=30
    ),
    data=st.data(),
    q=st.floats(0, 100),
)
def test_weighted_percentile_equals_expanded_percentile(values, data, q):
    v = np.array(values, dtype=np.float64)
    w = np.array(
        data.draw(st.lists(st.integers(0, 20), min_size=len(v), max_size=len(v))), dtype=np.int64
    )
    if w.sum() == 0:
        w[0] = 1
    expected = float(np.percentile(np.repeat(v, w), q))
    got = weighted_percentile(v, w, q)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9 * (1 + float(np.abs(v).max())))


def test_weighted_percentile_exact_cases():
    v = np.array([3.0, 1.0, 2.0])
    w = np.array([1, 2, 1])
    # expanded: 1, 1, 2, 3
    assert weighted_percentile(v, w, 0) == 1.0
    assert weighted_percentile(v, w, 50) == 1.5
    assert weighted_percentile(v, w, 100) == 3.0
    assert weighted_percentile(v, w, 75) == 2.25


def records(rows):
    """rows: (status, arrival_s, first_token_s, finish_s, input, output, preemptions)."""
    status = np.array([r[0] for r in rows], dtype=object)
    arrival = np.array([r[1] for r in rows], dtype=np.float64)
    first = np.array([np.nan if r[2] is None else r[2] for r in rows], dtype=np.float64)
    finish = np.array([np.nan if r[3] is None else r[3] for r in rows], dtype=np.float64)
    out = np.array([r[5] for r in rows], dtype=np.int64)
    ttft = (first - arrival) * 1000
    e2el = (finish - arrival) * 1000
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (e2el - ttft) / (out - 1), np.nan)
    return {
        "status": status,
        "arrival_s": arrival,
        "first_token_s": first,
        "finish_s": finish,
        "input_tokens": np.array([r[4] for r in rows], dtype=np.int64),
        "output_tokens": out,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "e2el_ms": e2el,
        "preemptions": np.array([r[6] for r in rows], dtype=np.int64),
    }


ROWS = [
    # status, arrival, first token, finish, in, out, preemptions
    ("ok", 1.0, 1.1, 1.5, 100, 5, 0),  # ttft 100, tpot 100, e2el 500
    ("ok", 2.0, 2.4, 2.6, 50, 3, 1),  # ttft 400, tpot 100, e2el 600
    ("ok", 3.0, 3.05, 3.05, 10, 1, 0),  # ttft 50, single token: no tpot
    ("ok", 3.5, 3.6, 6.0, 20, 9, 2),  # ttft 100, tpot 300, e2el 2500
    ("rejected", 4.0, None, None, 9000, 4, 0),
]
ITL = (np.array([0.1, 0.2, 0.3]), np.array([6, 2, 8]))


def test_summary_counts_and_throughputs():
    s = summarize(records(ROWS), ITL, {})
    assert s["duration"] == pytest.approx(6.0 - 1.0)  # last finish - first arrival
    assert s["completed"] == 4
    assert s["rejected"] == 1
    assert s["unfinished"] == 0
    assert s["total_input_tokens"] == 180  # rejected requests' tokens are not counted
    assert s["total_output_tokens"] == 18
    assert s["request_throughput"] == pytest.approx(4 / 5)
    assert s["output_throughput"] == pytest.approx(18 / 5)
    assert s["total_token_throughput"] == pytest.approx(198 / 5)
    assert s["total_preemptions"] == 3
    # no SLO: every completed request is good; attainment is over all arrivals
    assert s["request_goodput"] == pytest.approx(4 / 5)
    assert s["goodput_token_throughput"] == pytest.approx(18 / 5)
    assert s["slo_attainment"] == pytest.approx(4 / 5)


def test_summary_latency_stats():
    s = summarize(records(ROWS), ITL, {})
    ttft = np.array([100.0, 400.0, 50.0, 100.0])
    assert s["mean_ttft_ms"] == pytest.approx(ttft.mean())
    assert s["median_ttft_ms"] == pytest.approx(100.0)
    assert s["std_ttft_ms"] == pytest.approx(ttft.std())  # population std, as vLLM
    assert s["p90_ttft_ms"] == pytest.approx(np.percentile(ttft, 90))
    assert s["p99_ttft_ms"] == pytest.approx(np.percentile(ttft, 99))
    # TPOT only over requests with more than one output token
    tpot = np.array([100.0, 100.0, 300.0])
    assert s["mean_tpot_ms"] == pytest.approx(tpot.mean())
    assert s["median_tpot_ms"] == pytest.approx(100.0)
    assert s["p99_tpot_ms"] == pytest.approx(np.percentile(tpot, 99))
    e2el = np.array([500.0, 600.0, 50.0, 2500.0])
    assert s["mean_e2el_ms"] == pytest.approx(e2el.mean())
    assert s["p90_e2el_ms"] == pytest.approx(np.percentile(e2el, 90))
    # ITL pairs expand to 6 × 100 ms, 2 × 200 ms, 8 × 300 ms
    itl = np.repeat([100.0, 200.0, 300.0], [6, 2, 8])
    assert s["mean_itl_ms"] == pytest.approx(itl.mean())
    assert s["median_itl_ms"] == pytest.approx(np.median(itl))
    assert s["std_itl_ms"] == pytest.approx(itl.std())
    assert s["p90_itl_ms"] == pytest.approx(np.percentile(itl, 90))


def test_tpot_formula():
    rec = records(ROWS)
    np.testing.assert_allclose(rec["tpot_ms"][[0, 1, 3]], [100.0, 100.0, 300.0])


def test_goodput_needs_every_slo():
    slo = {"ttft_ms": 200.0, "tpot_ms": 150.0, "e2el_ms": None}
    rec = records(ROWS)
    # row 0 meets both; row 1 breaks TTFT; row 2 has no TPOT (single token) and meets TTFT;
    # row 3 breaks TPOT; row 4 was rejected
    assert good_mask(rec, slo).tolist() == [True, False, True, False, False]
    s = summarize(rec, ITL, slo)
    assert s["request_goodput"] == pytest.approx(2 / 5)
    assert s["goodput_token_throughput"] == pytest.approx((5 + 1) / 5)
    assert s["slo_attainment"] == pytest.approx(2 / 5)  # the rejected one counts as a miss
    s = summarize(rec, ITL, {"e2el_ms": 550.0})
    assert s["slo_attainment"] == pytest.approx(2 / 5)  # rows 0 and 2


def test_unfinished_requests_miss_and_do_not_count_as_completed():
    rows = [*ROWS[:2], ("unfinished", 2.5, 2.7, None, 10, 50, 0)]
    s = summarize(records(rows), ITL, {})
    assert s["completed"] == 2
    assert s["unfinished"] == 1
    assert s["slo_attainment"] == pytest.approx(2 / 3)
    assert s["duration"] == pytest.approx(2.6 - 1.0)


def test_empty_and_all_rejected():
    none = (np.zeros(0), np.zeros(0, dtype=np.int64))
    s = summarize(records([("rejected", 1.0, None, None, 10, 10, 0)]), none, {"ttft_ms": 1.0})
    assert s["completed"] == 0
    assert s["duration"] == 0.0
    # a statistic over nothing is None (null in JSON), never 0 (DESIGN §4)
    assert s["request_throughput"] is None
    assert s["slo_attainment"] == 0.0  # one arrival, not good
    assert s["rejection_rate"] == 1.0
    assert s["prefix_cache_hit_rate"] is None
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p90", "p99"):
            assert s[f"{stat}_{metric}_ms"] is None
    s = summarize(records([]), none, {})
    assert s["completed"] == 0
    assert s["slo_attainment"] is None
    assert s["rejection_rate"] is None
    assert not any(isinstance(v, float) and math.isnan(v) for v in s.values())


def test_tpot_over_single_token_outputs_is_none():
    s = summarize(records([("ok", 1.0, 1.0, 1.5, 10, 1, 0)]), ITL, {})
    assert s["completed"] == 1
    assert s["mean_ttft_ms"] is not None
    assert s["mean_tpot_ms"] is None
    assert s["p99_tpot_ms"] is None


def test_summary_key_order_is_vllm_order():
    s = summarize(records(ROWS), ITL, {})
    keys = [k for k in s if k.endswith("_ttft_ms")]
    assert keys == ["mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p90_ttft_ms", "p99_ttft_ms"]
