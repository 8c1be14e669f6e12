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
        "cv": 0.1, "sigma": None, "session_cv": 0.0, "session": 0, "spells": None, "wander": None
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
        ({"wander": {"sigma": 0.0, "seconds": 1}}, "cost.linear.jitter.wander.sigma: got 0.0"),
        ({"wander": {"sigma": 0.1}}, "cost.linear.jitter.wander.seconds"),
        ({"wander": "fitted"}, "jitter.wander: got 'fitted', but the linear cost model has no"),
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
    assert JitterConfig(wander={"sigma": 0.05, "seconds": 1.0}).active


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
    from lyra_simpy.cost.hostnoise import fitted_spells

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


class Clock:
    """A simulated clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def wandering(clock: Clock, seed: int = 3, **jitter: object) -> JitteredCost:
    cfg = LinearCostConfig.model_validate({**LINEAR, "jitter": jitter})
    cost = with_jitter(LinearCost(cfg, 4), cfg, Streams(seed), 0, clock)
    assert isinstance(cost, JitteredCost)
    return cost


def test_the_wander_is_a_stationary_drift_correlated_over_its_seconds():
    # one step every 10 ms for 4000 s: ln(factor) has the stated sigma, and steps
    # dt apart correlate exp(-dt / tau)
    clock = Clock()
    cost = wandering(clock, wander={"sigma": 0.08, "seconds": 0.5})
    x = []
    for _ in range(400_000):
        x.append(math.log(cost.iteration_s(ONE) / 0.011))
        clock.now += 0.01
    x = np.asarray(x)
    assert np.median(x) == pytest.approx(0.0, abs=0.01)
    assert x.std() == pytest.approx(0.08, rel=0.05)
    for lag in (5, 50, 150):  # 0.05, 0.5 and 1.5 s
        r = np.corrcoef(x[:-lag], x[lag:])[0, 1]
        assert r == pytest.approx(math.exp(-lag * 0.01 / 0.5), abs=0.03), lag


def test_the_wander_runs_on_while_the_engine_idles():
    clock = Clock()
    cost = wandering(clock, wander={"sigma": 0.1, "seconds": 1.0})
    first = cost.iteration_s(ONE)
    assert cost.iteration_s(ONE) == first  # no time has passed: the same drift
    pairs = []
    for _ in range(2000):  # two steps 10 ms apart, then 50 s idle
        a = cost.iteration_s(ONE)
        clock.now += 0.01
        b = cost.iteration_s(ONE)
        clock.now += 50.0
        pairs.append((math.log(a / 0.011), math.log(b / 0.011)))
    a, b = np.asarray(pairs).T
    assert np.corrcoef(a, b)[0, 1] > 0.98  # 10 ms of a 1 s drift
    assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < 0.08  # 50 s apart: independent


def test_the_wander_draws_from_its_own_stream_and_leaves_the_other_noise_alone():
    clock = Clock()
    plain = wandering(clock, cv=0.02)
    drifted = wandering(clock, cv=0.02, wander={"sigma": 0.1, "seconds": 2.0})
    ratios = []
    for _ in range(500):
        ratios.append(drifted.iteration_s(ONE) / plain.iteration_s(ONE))
        clock.now += 0.02
    drift = Streams(3).get("wander0.0").standard_normal(JitteredCost.BLOCK)
    assert ratios[0] == pytest.approx(math.exp(0.1 * drift[0]))  # the stationary first draw
    assert len(set(np.round(ratios, 12))) == 500  # a factor that moves with time


def test_without_a_clock_the_wander_runs_on_the_steps_own_time():
    cost = jittered(wander={"sigma": 0.05, "seconds": 0.1})
    times = np.asarray(cost.decode_span_s(1, 10, 0, 100_000))
    x = np.log(times / 0.011)
    assert x.std() == pytest.approx(0.05, rel=0.08)
    # steps ~11 ms apart: neighbours correlate exp(-0.011 / 0.1)
    assert np.corrcoef(x[:-1], x[1:])[0, 1] == pytest.approx(math.exp(-0.11), abs=0.02)


def ou_series(rng: np.random.Generator, seconds: float, sigma: float, tau: float, step_s: float):
    """(end times, ln factors) of steps *step_s* apart under an OU drift."""
    n = int(seconds / step_s)
    a = math.exp(-step_s / tau)
    x = np.empty(n)
    x[0] = sigma * rng.standard_normal()
    z = rng.standard_normal(n)
    for i in range(1, n):
        x[i] = x[i - 1] * a + sigma * math.sqrt(1 - a * a) * z[i]
    return np.arange(1, n + 1) * step_s, x


def test_fitted_wander_recovers_the_drift_under_independent_noise_and_spells():
    from lyra_simpy.cost.hostnoise import fitted_wander

    rng = np.random.default_rng(11)
    runs = []
    for _ in range(6):  # six runs of 60 s, a step every 30 ms
        t, x = ou_series(rng, 60.0, 0.07, 1.5, 0.03)
        ratio = np.exp(x + 0.05 * rng.standard_normal(len(x)))  # and per-step noise
        ratio[rng.random(len(x)) < 0.01] *= 2.0  # and a few steps in a slow spell
        runs.append((t, 1.2 * ratio))  # a fit 1.2x off: the level is not the wander
    got = fitted_wander(runs)
    assert got is not None
    wander, pairs = got
    assert wander.sigma == pytest.approx(0.07, rel=0.15)
    assert wander.seconds == pytest.approx(1.5, rel=0.3)
    assert pairs > 100_000
    # no drift, only independent noise: next to nothing
    flat = [(t, np.exp(0.05 * rng.standard_normal(len(t)))) for t, _ in runs]
    quiet = fitted_wander(flat)
    assert quiet is None or quiet[0].sigma < 0.01
    assert fitted_wander([]) is None
    assert fitted_wander([(np.array([0.1]), np.array([1.0]))]) is None
