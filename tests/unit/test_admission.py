"""Admission policies on hand-built states (no SimPy), predictions computed by hand."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from lyra_simpy import ScenarioError
from lyra_simpy.cost import LinearCost, LinearCostConfig
from lyra_simpy.engine.request import Request
from lyra_simpy.policies import (
    ADMISSIONS,
    AlwaysAdmission,
    AlwaysConfig,
    EngineView,
    Limits,
    SLOAdmission,
    SLOAdmissionConfig,
)

NOW = 10.0
#: 10 ms + 1 ms per sequence + 0.1 ms per prompt token, no padding
COST = LinearCost(LinearCostConfig(base_ms=10, per_seq_ms=1, per_prefill_token_ms=0.1), 2)


def new(i: int, input_tokens: int, output_tokens: int = 10, waited_ms: float = 0.0) -> Request:
    return Request(i, i, NOW - waited_ms / 1000.0, input_tokens, output_tokens)


def decoding(i: int, input_tokens: int, generated: int, output_tokens: int) -> Request:
    return Request(
        i,
        i,
        0.0,
        input_tokens,
        output_tokens,
        computed_tokens=input_tokens + generated - 1,
        generated_tokens=generated,
        running=True,
    )


def view(waiting=(), running=()) -> EngineView:
    return EngineView(NOW, list(waiting), list(running), 1000, 16, True)


def slo(
    ttft_ms: float | None = 100.0,
    tpot_ms: float | None = None,
    max_num_seqs: int = 2,
    budget: int | None = 100,
    **config: object,
) -> SLOAdmission:
    return SLOAdmission(
        SLOAdmissionConfig(**config), COST, Limits(ttft_ms, tpot_ms, max_num_seqs, budget)
    )


def test_always_admits_and_is_not_asked():
    policy = AlwaysAdmission(AlwaysConfig(), COST, Limits(None, None, 4, None))
    assert policy.admits_all
    assert policy.decide(new(0, 50), view()) == "admit"
    assert not slo().admits_all
    assert set(ADMISSIONS) == {"always", "slo"}


def test_prediction_on_an_empty_engine():
    # prefill alone: 10 + 1 + 0.1 x 50 = 16 ms; then one row decodes: 10 + 1 = 11 ms
    ttft_s, tpot_s = slo().predict(new(0, 50), [], [])
    assert ttft_s == pytest.approx(0.016)
    assert tpot_s == pytest.approx(0.011)


def test_prediction_replays_the_queue_ahead_by_hand():
    running = [decoding(0, 30, generated=7, output_tokens=10)]  # 3 tokens to go
    ahead = new(1, 40, output_tokens=10)
    me = new(2, 50, output_tokens=10)
    # it 1: the waiting request joins the decode (2 seqs): 10 + 2 + 0.1 x 40 = 16 ms
    #       running: 2 to go; joined: 9 to go. No slot left (max_num_seqs 2).
    # it 2-3: decode 2 rows to the first completion: 2 x (10 + 2) = 24 ms -> 40 ms
    # it 4: me joins the one left: 10 + 2 + 0.1 x 50 = 17 ms -> 57 ms
    # then 2 rows decode: 12 ms per token for me and the one running
    ttft_s, tpot_s = slo().predict(me, running, [ahead])
    assert ttft_s == pytest.approx(0.057)
    assert tpot_s == pytest.approx(0.012)


def test_the_token_budget_holds_the_head_until_a_completion():
    running = [decoding(0, 30, generated=8, output_tokens=10)]  # 2 tokens to go
    me = new(1, 50)
    # budget 50 less 1 decode token leaves 49 < 50: two decodes of 11 ms, then the
    # prefill alone (16 ms)
    ttft_s, _ = slo(budget=50).predict(me, running, [])
    assert ttft_s == pytest.approx(0.022 + 0.016)


def test_decide_compares_waited_plus_predicted_with_the_slo_less_slack():
    running = [decoding(0, 30, generated=7, output_tokens=10)]
    ahead = new(1, 40)
    me = new(2, 50, waited_ms=3.0)  # predicted TTFT = 3 + 57 = 60 ms
    v = view([ahead], running)
    assert slo(ttft_ms=70.0).decide(me, v) == "admit"  # 60 <= 0.9 x 70 = 63
    assert slo(ttft_ms=65.0).decide(me, v) == "reject"  # 60 > 58.5
    assert slo(ttft_ms=65.0, ttft_slack=0.0).decide(me, v) == "admit"
    # TPOT once it joined: 12 ms
    assert slo(ttft_ms=None, tpot_ms=13.4).decide(me, v) == "admit"  # 12 <= 12.06
    assert slo(ttft_ms=None, tpot_ms=13.0).decide(me, v) == "reject"  # 12 > 11.7
    assert slo(ttft_ms=None, tpot_ms=13.0, tpot_slack=0.05).decide(me, v) == "admit"


def test_single_token_requests_have_no_tpot_to_break():
    me = new(0, 50, output_tokens=1)
    assert slo().predict(me, [], [])[1] == 0.0
    assert slo(ttft_ms=None, tpot_ms=1.0).decide(me, view()) == "admit"


def test_a_prompt_over_the_budget_is_never_predicted_to_run():
    ttft_s, tpot_s = slo(budget=40).predict(new(0, 50), [], [])
    assert math.isinf(ttft_s)
    assert math.isinf(tpot_s)
    assert slo(budget=40, mode="defer").decide(new(0, 50), view()) == "reject"


def test_without_a_budget_every_prompt_fits():
    ttft_s, _ = slo(budget=None).predict(new(0, 5000), [], [])
    assert ttft_s == pytest.approx(0.511)


def test_defer_holds_back_until_the_bound():
    running = [decoding(0, 30, generated=7, output_tokens=10)]
    ahead = new(1, 40)
    v = view([ahead], running)
    policy = slo(ttft_ms=65.0, mode="defer", max_defer_ms=20.0)
    assert policy.decide(new(2, 50, waited_ms=3.0), v) == "defer"
    assert policy.decide(new(2, 50, waited_ms=21.0), v) == "timeout"  # waited past the bound
    # nothing in flight: waiting cannot change the prediction
    too_big = slo(ttft_ms=15.0, mode="defer")  # 16 ms alone > 13.5 ms
    assert too_big.decide(new(0, 50), view()) == "reject"
    # TTFT out of reach even on an empty engine: waited 43 ms + 16 ms alone > 58.5 ms
    patient = slo(ttft_ms=65.0, mode="defer", max_defer_ms=1e6)
    assert patient.decide(new(2, 50, waited_ms=42.0), v) == "defer"  # 58 ms: in reach
    assert patient.decide(new(2, 50, waited_ms=43.0), v) == "reject"
    tpot_only = slo(ttft_ms=None, tpot_ms=12.5, mode="defer", max_defer_ms=1e6)
    assert tpot_only.decide(new(2, 50, waited_ms=500.0), v) == "defer"


def test_config_is_closed_and_bounded():
    with pytest.raises(ValidationError):
        SLOAdmissionConfig(ttft_slack=1.0)
    with pytest.raises(ValidationError):
        SLOAdmissionConfig(mode="drop")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        SLOAdmissionConfig(max_defer_ms=0)
    with pytest.raises(ValidationError):
        AlwaysConfig(mode="reject")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match=r"slo\.ttft_ms or slo\.tpot_ms"):
        slo(ttft_ms=None, tpot_ms=None)


def test_slo_admission_without_an_slo_is_one_clear_line(make_scenario):
    with pytest.raises(ScenarioError) as exc:
        make_scenario({"slo": {}, "admission": {"name": "slo"}})
    assert str(exc.value) == (
        "admission: got name 'slo' with neither slo.ttft_ms nor slo.tpot_ms set; "
        "set one of them (ms > 0) or use admission: always"
    )
    ok = make_scenario({"slo": {"tpot_ms": 20}, "admission": {"name": "slo", "mode": "defer"}})
    assert ok.admission.name == "slo"
    with pytest.raises(ScenarioError, match=r"admission: got 'sla', must be one of"):
        make_scenario({"admission": {"name": "sla"}})
    with pytest.raises(ScenarioError, match=r"admission\.slo\.ttft_slack: got 2"):
        make_scenario({"admission": {"name": "slo", "ttft_slack": 2}})


def test_the_replay_stops_at_the_horizon():
    running = [decoding(0, 30, generated=7, output_tokens=10)]
    ahead, me = new(1, 40), new(2, 50)
    policy = slo()
    assert policy.predict(me, running, [ahead], horizon_s=0.057)[0] == pytest.approx(0.057)
    assert math.isinf(policy.predict(me, running, [ahead], horizon_s=0.056)[0])
    assert math.isinf(policy.predict(me, running, [ahead], horizon_s=0.030)[0])  # mid-decode
    assert math.isinf(policy.predict(me, running, [ahead], horizon_s=0.010)[0])  # 1st prefill


def test_a_tpot_no_batch_can_break_needs_no_replay(monkeypatch):
    def no_replay(*args, **kwargs):
        raise AssertionError("replayed")

    # 2 rows over a 1000-token cache: 10 + 2 ms (no context cost) <= 0.9 x 14 ms
    safe = SLOAdmission(SLOAdmissionConfig(), COST, Limits(None, 14.0, 2, 100, 1000))
    monkeypatch.setattr(safe, "predict", no_replay)
    assert safe.decide(new(0, 50), view()) == "admit"
    # a tight TPOT, an unknown cache, or a TTFT SLO: the replay decides
    for limits in (
        Limits(None, 13.0, 2, 100, 1000),
        Limits(None, 14.0, 2, 100),
        Limits(1e3, 14.0, 2, 100, 1000),
    ):
        policy = SLOAdmission(SLOAdmissionConfig(), COST, limits)
        monkeypatch.setattr(policy, "predict", no_replay)
        with pytest.raises(AssertionError, match="replayed"):
            policy.decide(new(0, 50), view())


def chunked_slo(ttft_ms: float, max_num_seqs: int = 2, budget: int = 100, chunk: int = 100):
    limits = Limits(ttft_ms, None, max_num_seqs, budget, None, chunk)
    return SLOAdmission(SLOAdmissionConfig(ttft_slack=0.0), COST, limits)


def test_chunked_prediction_spreads_a_long_prompt_over_iterations():
    # 250 tokens, budget 100, alone: chunks 100, 100, 50 -> 21 + 21 + 16 ms = 58 ms
    policy = chunked_slo(ttft_ms=1000.0)
    me = new(0, 250)
    assert policy.predict(me, [], [])[0] == pytest.approx(0.058)
    assert policy.decide(me, view()) == "admit"
    # an unchunked replay cannot fit it in a 100-token budget at all
    assert slo(ttft_ms=1000.0).predict(me, [], [])[0] == math.inf
    assert chunked_slo(ttft_ms=57.0).decide(me, view()) == "reject"


def test_chunked_prediction_shares_the_budget_with_decodes_and_the_queue():
    # one decode takes a token of the 100; the queued 150-token prompt A goes first:
    # it. 1: 1 decode + 99 of A             10 + 2 + 9.9 = 21.9 ms
    # it. 2: 1 decode + 51 of A + 48 of me  10 + 3 + 9.9 = 22.9 ms (A's first token)
    # it. 3: 2 decodes + 98 of me           10 + 3 + 9.8 = 22.8 ms (me's first token)
    d = decoding(1, 10, 1, 50)
    a = new(2, 150)
    me = new(3, 146)
    policy = chunked_slo(ttft_ms=1000.0, max_num_seqs=3)
    t, _ = policy.predict(me, [d], [a])
    assert t == pytest.approx(0.0219 + 0.0229 + 0.0228)
