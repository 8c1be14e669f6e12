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


def test_a_bands_width_is_read_over_the_real_value():
    table = [{"metric": m, "sim": 104.0, "real": 100.0, "error": 0.04, "spread": 0.01}
             for m in noise.METRICS]  # fmt: skip
    got = {m: {"low": 97.0, "high": 103.0, "median": 100.0, "values": []} for m in noise.METRICS}
    assert noise.widths(table, got) == [0.06] * len(noise.METRICS)


def test_the_draws_spread_is_read_beside_the_real_repeats():
    table = [{"metric": m, "sim": 104.0, "real": 100.0, "error": 0.04, "spread": 0.01,
              "runs": [90.0, 100.0, 110.0]} for m in noise.METRICS]  # fmt: skip
    got = {m: {"low": 99.0, "high": 101.0, "median": 100.0, "values": [99.0, 100.0, 101.0]}
           for m in noise.METRICS}  # fmt: skip
    assert noise.spreads(table, got) == [(0.1, 0.01)] * len(noise.METRICS)


def test_a_table_is_left_out_where_its_fit_lacks_what_the_draws_need():
    from types import SimpleNamespace as Ns

    profile_fit = Ns(cost=Ns(fit=Ns(noise=Ns(wander=object(), session=Ns(cv=0.03)))))
    runs_fit = Ns(cost=Ns(fit=Ns(noise=Ns(wander=object(), session=None))))
    linear = Ns(cost=Ns())
    assert noise.has_fitted(profile_fit, "session")
    assert noise.has_fitted(profile_fit, "wander")
    assert not noise.has_fitted(runs_fit, "session")  # runs alone: no speed references
    assert not noise.has_fitted(linear, "wander")
