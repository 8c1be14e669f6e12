"""``validation/llamacpp_noise.py``: the matrix's cells scored with the median of noise
draws as the prediction, and whether each real value lies in the draws' band."""

from __future__ import annotations

from builders import validation_module

noise = validation_module("llamacpp_noise")


def test_a_load_is_scored_as_stored_with_the_draws_median_and_by_the_band():
    real = dict.fromkeys(noise.METRICS, 100.0)
    # stored: every cell 4 % high with a 1 % spread (throughput in, p50s in, p90s out)
    table = [{"metric": m, "sim": 104.0, "real": 100.0, "error": 0.04, "spread": 0.01}
             for m in noise.METRICS]  # fmt: skip
    # the draws: median 100.5 (every cell in), their band 99-103 (every real inside)
    got = {m: {"low": 99.0, "high": 103.0, "median": 100.5, "values": []} for m in real}
    assert noise.score(table, got) == (4, 7, 7)
    # a band above the real values: none inside, and a median 20 % high misses them all
    high = {m: {"low": 110.0, "high": 130.0, "median": 120.0, "values": []} for m in real}
    assert noise.score(table, high) == (4, 0, 0)


def test_the_tables_of_a_stored_point_in_order():
    res = {"loads": {"poisson_0.3": {"table": ["t1"]}}, "table2": {"poisson_0.3": ["t2"]}}
    assert noise.tables_of(res) == [{"poisson_0.3": ["t1"]}, {"poisson_0.3": ["t2"]}, {}]
