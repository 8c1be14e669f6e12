"""Queueing theory checks (STYLE §12c, as Ciw validates its simulator).

With ``max_num_seqs: 1`` (or a static batch of 1), one-token prompts and outputs and a
linear cost of ``base_ms = D`` only, every request is one engine iteration of fixed length
*D*, served FCFS; a request that arrives while the server is idle starts at once, one that
arrives mid-iteration waits for the iteration boundary, which is when the server would
have become free anyway. Poisson arrivals at rate λ therefore make an M/D/1 queue: the
mean wait in queue is Pollaczek-Khinchine's ρD / (2(1 - ρ)) with ρ = λD, and a fraction
1 - ρ of requests do not wait at all. TTFT = wait + D.

The statistical checks use 200 000 requests: at ρ = 0.7 the mean wait of one run has a
relative standard deviation of about 1 % (3 % at 20 000, measured over seeds), so the
4 % bound holds for any seed, not just a lucky one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lyra_simpy import scenario_from_dict, simulate

D_S = 0.010
RATE_PER_S = 70.0
RHO = RATE_PER_S * D_S
PK_WAIT_S = RHO * D_S / (2 * (1 - RHO))

CONTINUOUS = {"name": "continuous", "max_num_seqs": 1, "max_num_batched_tokens": 16}
STATIC = {"name": "static", "max_batch": 1}


def md1(
    scheduler: dict[str, Any],
    n: int,
    seed: int = 1,
    output_tokens: int = 1,
    rate_per_s: float = RATE_PER_S,
) -> dict[str, np.ndarray]:
    raw = {
        "seed": seed,
        "workload": {
            "num_requests": n,
            "arrival": {"name": "poisson", "rate_per_s": rate_per_s},
            "input_tokens": {"name": "fixed", "tokens": 1},
            "output_tokens": {"name": "fixed", "tokens": output_tokens},
        },
        "scheduler": scheduler,
        "kv_cache": {"block_size": 16, "num_blocks": 16},
        "cost": {"name": "linear", "base_ms": D_S * 1000},
        "simulation": {"timeseries": False},
    }
    res = simulate(scenario_from_dict(raw))
    assert (res.records["status"] == "ok").all()
    return res.records


def lindley_finish(arrival: np.ndarray, service_s: float, steps: int = 1) -> np.ndarray:
    """FCFS single-server finish times, ``steps`` iterations of *service_s* each."""
    finish = np.empty_like(arrival)
    free = 0.0
    for i, a in enumerate(arrival.tolist()):
        t = max(a, free)
        for _ in range(steps):
            t = t + service_s
        finish[i] = free = t
    return finish


@pytest.mark.parametrize("scheduler", [CONTINUOUS, STATIC], ids=["continuous", "static"])
def test_each_request_matches_the_lindley_recursion(scheduler):
    rec = md1(scheduler, n=20_000)
    expected = lindley_finish(rec["arrival_s"], D_S)
    # one iteration per request: the first token is the last, at exactly these times
    np.testing.assert_array_equal(rec["first_token_s"], expected)
    np.testing.assert_array_equal(rec["finish_s"], expected)


def test_three_token_requests_match_the_lindley_recursion():
    # a prefill and two decodes of D each: deterministic service 3D; the other requests
    # wait (max_num_seqs 1) until the running one is done
    rec = md1(CONTINUOUS, n=5_000, output_tokens=3, rate_per_s=RATE_PER_S / 3)
    expected = lindley_finish(rec["arrival_s"], D_S, steps=3)
    np.testing.assert_allclose(rec["finish_s"], expected, rtol=1e-13, atol=0)
    np.testing.assert_allclose(rec["first_token_s"], expected - 2 * D_S, rtol=1e-12)
    np.testing.assert_allclose(rec["tpot_ms"], D_S * 1000, rtol=1e-9)


@pytest.mark.no_cover  # 200 000 requests: under coverage's tracer 4 × as long, no new lines
@pytest.mark.parametrize("scheduler", [CONTINUOUS, STATIC], ids=["continuous", "static"])
def test_mean_wait_is_pollaczek_khinchine(scheduler):
    rec = md1(scheduler, n=200_000)
    wait_s = rec["ttft_ms"] / 1000.0 - D_S
    assert wait_s.min() > -1e-12
    assert wait_s.mean() == pytest.approx(PK_WAIT_S, rel=0.04)
    # an M/D/1 server is idle a fraction 1 - ρ of the time: that many never wait
    assert (wait_s < 1e-9).mean() == pytest.approx(1 - RHO, abs=0.01)
