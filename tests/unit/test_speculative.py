"""Speculative decoding: acceptance draws, token accounting and iteration cost."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from lyra_simpy import simulate
from lyra_simpy.engine.speculative import SpeculativeConfig, Speculator
from lyra_simpy.errors import ScenarioError


def test_mean_accepted_tokens_sets_one_rate_per_position():
    cfg = SpeculativeConfig(num_steps=3, mean_accepted_tokens=2.0)
    a = cfg.rates()
    assert a[0] == pytest.approx(a[2])
    assert a[0] + a[0] ** 2 + a[0] ** 3 == pytest.approx(2.0)


@pytest.mark.parametrize(
    "cfg",
    [
        SpeculativeConfig(num_steps=3, mean_accepted_tokens=1.4),
        SpeculativeConfig(num_steps=2, acceptance_rates=[0.9, 0.5]),
    ],
)
def test_mean_accepted_length_matches_the_configured_one(cfg):
    drawn = Speculator(cfg, np.random.default_rng(1)).accepted(200_000)
    rates = cfg.rates()
    expected = sum(np.prod(rates[: j + 1]) for j in range(cfg.num_steps))
    assert np.mean(drawn) == pytest.approx(expected, rel=0.01)
    assert min(drawn) >= 0
    assert max(drawn) <= cfg.num_steps


def test_draws_taken_ahead_give_the_numbers_of_one_draw_per_step():
    # the speculator draws DRAWN_ROWS sequences at once and hands them out step by step:
    # each step gets what drawing its own n x num_steps uniforms would have given, across
    # refills and steps wider than a refill
    cfg = SpeculativeConfig(num_steps=3, acceptance_rates=[0.8, 0.6, 0.4])
    spec = Speculator(cfg, np.random.default_rng(5))
    spec.DRAWN_ROWS = 7
    rng, rates = np.random.default_rng(5), cfg.rates()
    for n in [1, 3, 2, 5, 1, 12, 4, 4, 9, 1]:
        want = [
            next((j for j, (u, r) in enumerate(zip(row, rates, strict=True)) if u >= r), 3)
            for row in rng.random((n, 3))
        ]
        assert spec.accepted(n) == want
    assert set(spec.accepted(50)) == {0, 1, 2, 3}


def test_bad_acceptance_settings_are_one_line_errors():
    with pytest.raises(ValidationError, match="exactly one of"):
        SpeculativeConfig(num_steps=2)
    with pytest.raises(ValidationError, match="must be num_steps"):
        SpeculativeConfig(num_steps=2, acceptance_rates=[0.5])
    with pytest.raises(ValidationError, match="must be <= num_steps"):
        SpeculativeConfig(num_steps=2, mean_accepted_tokens=2.5)


def one_long_request(make_scenario, spec, out=4001, **cost):
    return simulate(
        make_scenario(
            {
                "workload.num_requests": 1,
                "workload.input_tokens": {"name": "fixed", "tokens": 100},
                "workload.output_tokens": {"name": "fixed", "tokens": out},
                "scheduler": {"name": "continuous", "max_num_seqs": 8,
                              "max_num_batched_tokens": 8192},
                "kv_cache": {"block_size": 16, "num_blocks": 2000},
                "cost": {"name": "linear", "base_ms": 10, **cost},
                "speculative": spec,
            }
        )
    )  # fmt: skip


def test_each_step_emits_one_plus_the_accepted_tokens_as_one_chunk(make_scenario):
    spec = {"num_steps": 3, "mean_accepted_tokens": 2.0, "draft_step_ms": 1.0}
    res = one_long_request(make_scenario, spec)
    (r,) = res.requests()
    assert r["status"] == "ok"
    decode_steps = res.engine["iterations"] - 1  # after the prefill
    assert 4000 / decode_steps == pytest.approx(3.0, rel=0.02)  # 1 + 2 accepted
    _, weights = res.itl_s
    assert int(weights.sum()) == decode_steps  # one gap per chunk, as vLLM counts ITL
    # every step: 10 ms + 3 draft passes of 1 ms
    assert res.summary["mean_itl_ms"] == pytest.approx(13.0)
    assert r["tpot_ms"] == pytest.approx(13.0 * decode_steps / 4000)


def test_all_accepted_by_hand(make_scenario):
    # every draft accepted: 4 tokens per step; the verify pass costs 3 prompt tokens
    # per sequence (0.1 ms each), the drafts 3 × 0.5 ms
    spec = {"num_steps": 3, "acceptance_rates": [1.0, 1.0, 1.0], "draft_step_ms": 0.5}
    res = one_long_request(make_scenario, spec, out=9, per_prefill_token_ms=0.1)
    (r,) = res.requests()
    # prefill 10 + 10 = 20 ms → token 1; then steps of 10 + 0.3 + 1.5 = 11.8 ms emit
    # 4 + 4 tokens
    assert r["ttft_ms"] == pytest.approx(20.0)
    assert r["e2el_ms"] == pytest.approx(20.0 + 2 * 11.8)
    assert res.engine["iterations"] == 3


def test_static_batching_takes_no_draft(make_scenario):
    with pytest.raises(ScenarioError, match="speculative: got a draft with scheduler 'static'"):
        make_scenario(
            {
                "scheduler": {"name": "static", "max_batch": 4},
                "speculative": {"num_steps": 2, "mean_accepted_tokens": 1.0},
            }
        )
