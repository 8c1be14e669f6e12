"""Step-time jitter (cost/jitter.py): factors drawn from the named stream in order, one
per iteration; the session factor; off means the model itself; fusion off; one-line
errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lyra_simpy import simulate
from lyra_simpy.cost import LinearCost, LinearCostConfig
from lyra_simpy.cost.base import BatchShape
from lyra_simpy.cost.jitter import JitterConfig, JitteredCost, expected, with_jitter
from lyra_simpy.errors import ScenarioError
from lyra_simpy.rng import Streams

#: 10 ms + 1 ms per sequence: one prefill or decode of one sequence costs 11 ms.
LINEAR = {"name": "linear", "base_ms": 10.0, "per_seq_ms": 1.0}
ONE = BatchShape(0, 0, 0, 1, 1, 10)


def lognormal_parameters(cv: float) -> tuple[float, float]:
    """mu, sigma of a log-normal with mean 1 and coefficient of variation *cv*."""
    sigma2 = math.log1p(cv * cv)
    return -sigma2 / 2, math.sqrt(sigma2)


def jittered(seed: int = 7, **jitter: float) -> JitteredCost:
    cfg = LinearCostConfig.model_validate({**LINEAR, "jitter": jitter})
    cost = with_jitter(LinearCost(cfg, 4), cfg, Streams(seed), 0)
    assert isinstance(cost, JitteredCost)
    return cost


def test_each_iteration_takes_the_next_draw_of_its_stream():
    cost = jittered(cv=0.02)
    mu, sigma = lognormal_parameters(0.02)
    draws = Streams(7).get("jitter0.0").lognormal(mu, sigma, 5)
    # one single step, then a span of three, then one more: the draws in order
    got = [cost.iteration_s(ONE), *cost.decode_span_s(1, 10, 1, 3), cost.iteration_s(ONE)]
    assert got == [0.011 * d for d in draws]


def test_draws_come_in_blocks_but_in_the_same_order():
    cost = jittered(cv=0.02)
    mu, sigma = lognormal_parameters(0.02)
    draws = Streams(7).get("jitter0.0").lognormal(mu, sigma, JitteredCost.BLOCK + 3)
    got = cost.decode_span_s(1, 10, 1, JitteredCost.BLOCK - 2) + cost.decode_span_s(1, 10, 1, 5)
    assert got == [0.011 * d for d in draws]


def test_the_session_factor_is_shared_and_differs_between_sessions():
    mu, sigma = lognormal_parameters(0.01)
    first = Streams(7).get("jitter0.0").lognormal(mu, sigma)
    cost = jittered(session_cv=0.01)
    assert cost.session_factor == first
    assert [cost.iteration_s(ONE) for _ in range(3)] == [0.011 * first] * 3
    other = jittered(session_cv=0.01, session=1)
    assert other.session_factor == Streams(7).get("jitter0.1").lognormal(mu, sigma)
    assert other.session_factor != first


def test_factors_have_mean_one_and_the_stated_spread():
    cost = jittered(seed=3, cv=0.05)
    factors = np.array(cost.decode_span_s(1, 10, 0, 40_000)) / 0.011
    # mean 1 within 4 standard errors; CV 0.05 within 3 %
    assert abs(factors.mean() - 1.0) < 4 * 0.05 / math.sqrt(40_000)
    assert factors.std() / factors.mean() == pytest.approx(0.05, rel=0.03)


def test_no_jitter_is_the_cost_model_itself():
    for jitter in (None, {"cv": 0, "session_cv": 0, "session": 3}):
        cfg = LinearCostConfig.model_validate({**LINEAR, "jitter": jitter})
        base = LinearCost(cfg, 4)
        assert with_jitter(base, cfg, Streams(7), 0) is base
        assert expected(base) is base
    cost = jittered(cv=0.1)
    assert expected(cost) is cost.base
    assert cost.describe()["jitter"] == {
        "cv": 0.1, "sigma": None, "session_cv": 0.0, "session": 0, "spells": None
    }  # fmt: skip


def test_a_run_charges_every_iteration_its_draw(make_scenario):
    # one request at a time, 4 prompt tokens and 3 output tokens each: a prefill and two
    # decodes of one sequence per request, 11 ms each before the jitter
    changes = {
        "workload.num_requests": 3,
        "workload.arrival": {"name": "closed_loop", "concurrency": 1},
        "workload.input_tokens": {"name": "fixed", "tokens": 4},
        "workload.output_tokens": {"name": "fixed", "tokens": 3},
        "cost": {**LINEAR, "jitter": {"cv": 0.02, "session_cv": 0.01}},
    }
    res = simulate(make_scenario(changes))
    ts = res.timeseries
    mu, sigma = lognormal_parameters(0.01)
    gen = Streams(7).get("jitter0.0")
    session = gen.lognormal(mu, sigma)
    mu, sigma = lognormal_parameters(0.02)
    factors = gen.lognormal(mu, sigma, 9) * session
    np.testing.assert_allclose(ts["end_s"] - ts["start_s"], 0.011 * factors, rtol=1e-12)
    assert res.engine["iterations"] == 9


def test_jitter_turns_fusion_off_so_fused_and_unfused_runs_agree(make_scenario):
    noisy = {"cost": {**LINEAR, "jitter": {"cv": 0.05}}, "workload.arrival.rate_per_s": 2.0}
    fused = simulate(make_scenario(noisy))
    unfused = simulate(make_scenario({**noisy, "simulation.fuse_iterations": False}))
    assert list(fused.requests()) == list(unfused.requests())
    assert fused.summary == unfused.summary
    exact = simulate(make_scenario({"workload.arrival.rate_per_s": 2.0}))
    assert fused.engine["iterations"] == exact.engine["iterations"]
    assert fused.summary["duration"] != exact.summary["duration"]
    again = simulate(make_scenario(noisy))
    assert again.summary == fused.summary  # same seed and session: same noise
    other = simulate(make_scenario({**noisy, "cost.jitter.session": 1}))
    assert other.summary["duration"] != fused.summary["duration"]


@pytest.mark.parametrize(
    ("jitter", "message"),
    [
        ({"cv": -0.1}, "cost.linear.jitter.cv: got -0.1"),
        ({"session": 1.5}, "cost.linear.jitter.session: got 1.5"),
        ({"spread": 0.1}, "cost.linear.jitter.spread: unknown field"),
        ({"spells": {"share": 1.0, "factor": 2, "steps": 3}}, "cost.linear.jitter.spells.share"),
        ({"spells": {"share": 0.2, "factor": 0.5, "steps": 3}}, "spells.factor: got 0.5"),
        ({"spells": "fitted"}, "jitter.spells: got 'fitted', but the linear cost model has no"),
    ],
)
def test_bad_jitter_is_a_one_line_error(make_scenario, jitter, message):
    with pytest.raises(ScenarioError) as info:
        make_scenario({"cost": {**LINEAR, "jitter": jitter}})
    assert "\n" not in str(info.value)
    assert message in str(info.value)


def test_the_config_defaults_are_off():
    assert not JitterConfig().active
    assert JitterConfig(cv=0.02).active


def test_spells_cover_their_share_in_runs_of_their_length():
    cost = jittered(seed=5, spells={"share": 0.25, "factor": 2.0, "steps": 5.0})
    factors = np.array(cost.decode_span_s(1, 10, 0, 200_000)) / 0.011
    slow = np.isclose(factors, 2.0)
    assert np.isclose(factors[~slow], 1.0).all()  # no other noise asked for
    assert slow.mean() == pytest.approx(0.25, abs=0.01)
    starts = int(slow[0]) + int(np.sum(slow[1:] & ~slow[:-1]))
    assert slow.sum() / starts == pytest.approx(5.0, rel=0.05)
    assert factors.mean() == pytest.approx(1.25, abs=0.01)  # 1 + share (factor - 1)


def test_spells_draw_from_their_own_stream_and_leave_the_other_noise_alone():
    plain = jittered(cv=0.02)
    spelled = jittered(cv=0.02, spells={"share": 0.3, "factor": 1.7, "steps": 4.0})
    a = np.array(plain.decode_span_s(1, 10, 0, 5000))
    b = np.array(spelled.decode_span_s(1, 10, 0, 5000))
    ratio = b / a
    assert set(np.round(ratio, 9)) == {1.0, 1.7}


def test_spells_with_share_zero_never_slow_a_step():
    cost = jittered(spells={"share": 0.0, "factor": 3.0, "steps": 2.0})
    assert cost.decode_span_s(1, 10, 0, 1000) == pytest.approx([0.011] * 1000)


def test_fitted_spells_count_share_factor_and_length():
    from lyra_simpy.cost.jitter import fitted_spells

    # two runs: at the fit (1.0) but for a spell of 3 steps at 1.8 and one of 1 at 2.0
    one = np.array([1.0, 1.0, 1.8, 1.8, 1.8, 1.0, 1.0, 1.0])
    two = np.array([2.0, 1.0, 1.0, 1.0])
    got = fitted_spells([one, two])
    assert got is not None
    assert got.share == pytest.approx(4 / 12)
    assert got.factor == pytest.approx(1.8)  # the slow steps' median over the others'
    assert got.steps == pytest.approx(2.0)  # 4 slow steps in 2 spells
    assert fitted_spells([np.array([1.0, 1.1, 0.9])]) is None
    assert fitted_spells([]) is None
