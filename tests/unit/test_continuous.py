"""ContinuousBatching.plan / refusal on hand-built views (no SimPy)."""

from __future__ import annotations

import pytest

from builders import BS, decoding_req, waiting_req
from lyra_simpy.engine.request import Request
from lyra_simpy.policies import ContinuousBatching, ContinuousConfig, EngineView


def view(waiting=(), running=(), free_blocks=1000, now_s=10.0, pending=True) -> EngineView:
    return EngineView(now_s, list(waiting), list(running), free_blocks, BS, pending)


def sched(max_num_seqs: int = 8, max_num_batched_tokens: int = 1024) -> ContinuousBatching:
    return ContinuousBatching(
        ContinuousConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)
    )


def test_admits_fcfs_up_to_max_num_seqs():
    w = [waiting_req(i, 10 + i) for i in range(5)]
    plan = sched(max_num_seqs=3).plan(view(waiting=w))
    assert plan.prefill == [(w[0], 10), (w[1], 11), (w[2], 12)]
    assert plan.decode == []
    assert plan.preempt == []
    assert plan.wait_until_s is None


def test_whole_prompt_must_fit_budget_and_first_misfit_stops_admission():
    w = [waiting_req(0, 60), waiting_req(1, 50), waiting_req(2, 10)]
    plan = sched(max_num_batched_tokens=100).plan(view(waiting=w))
    # 50 > 100 - 60 stops admission; the 10-token prompt behind it is not taken (FCFS).
    assert plan.prefill == [(w[0], 60)]


def test_budget_filled_exactly():
    w = [waiting_req(0, 40), waiting_req(1, 50), waiting_req(2, 10)]
    plan = sched(max_num_batched_tokens=100).plan(view(waiting=w))
    assert [t for _, t in plan.prefill] == [40, 50, 10]


def test_kv_blocks_limit_admission():
    w = [waiting_req(0, 32), waiting_req(1, 64), waiting_req(2, 16)]  # 2, 4, 1 blocks
    plan = sched().plan(view(waiting=w, free_blocks=5))
    assert plan.prefill == [(w[0], 32)]
    plan = sched().plan(view(waiting=w, free_blocks=6))
    assert plan.prefill == [(w[0], 32), (w[1], 64)]
    plan = sched().plan(view(waiting=w, free_blocks=7))
    assert len(plan.prefill) == 3


def test_running_decode_first_and_count_against_seqs_and_budget():
    run = [decoding_req(0, 20, 3), decoding_req(1, 30, 1)]
    w = [waiting_req(2, 9), waiting_req(3, 1)]
    plan = sched(max_num_seqs=4, max_num_batched_tokens=10).plan(view(waiting=w, running=run))
    assert plan.decode == run
    # budget 10 - 2 decodes = 8 < 9: nothing admitted (and head-of-line order kept)
    assert plan.prefill == []
    w = [waiting_req(2, 8), waiting_req(3, 1)]
    plan = sched(max_num_seqs=3, max_num_batched_tokens=10).plan(view(waiting=w, running=run))
    assert plan.decode == run
    assert plan.prefill == [(w[0], 8)]  # one slot left of 3


def test_decode_takes_a_new_block_at_a_block_boundary():
    a = decoding_req(0, 16, 1)  # 16 tokens in 1 block; the next decode computes token 17
    plan = sched().plan(view(running=[a], waiting=[waiting_req(1, 16)], free_blocks=1))
    assert plan.decode == [a]
    assert plan.prefill == []  # the one free block went to the decode


def test_kv_short_preempts_newest_and_admits_nothing():
    a = decoding_req(0, 16, 1)  # needs a block
    b = decoding_req(1, 40, 1)  # 40 tokens, 3 blocks, needs none
    c = waiting_req(2, 4)  # would fit in the 2 blocks left after the preemption
    plan = sched().plan(view(running=[a, b], waiting=[c], free_blocks=0))
    assert plan.preempt == [b]
    assert plan.decode == [a]
    assert plan.prefill == []


def test_preemption_order_newest_first_until_it_fits():
    a, b, c = (decoding_req(i, 16, 1) for i in range(3))  # each holds 1 block and needs 1
    plan = sched().plan(view(running=[a, b, c], free_blocks=1))
    assert plan.decode == [a, b]
    assert plan.preempt == [c]
    plan = sched().plan(view(running=[a, b, c], free_blocks=0))
    # a takes c's block; b then preempts itself (it is the newest left)
    assert plan.preempt == [c, b]
    assert plan.decode == [a]


def test_sole_request_preempts_itself():
    a = decoding_req(0, 16, 1)
    plan = sched().plan(view(running=[a], free_blocks=0))
    assert plan.preempt == [a]
    assert plan.empty


def test_preempted_request_recomputes_prompt_and_generated_tokens():
    r = Request(0, 0, 0.0, 20, 10, generated_tokens=4, preemptions=1)
    plan = sched().plan(view(waiting=[r]))
    assert plan.prefill == [(r, 24)]


@pytest.mark.parametrize(
    ("inp", "out", "budget", "num_blocks", "want"),
    [
        (100, 1, 100, 100, None),  # longest prefill = 100 tokens
        (100, 2, 100, 100, "exceeds_token_budget"),  # a recompute would need 101 > budget
        (90, 11, 100, 100, None),
        (90, 12, 100, 100, "exceeds_token_budget"),
        (32, 1, 100, 2, None),  # 32 tokens = 2 blocks of 16
        (32, 2, 100, 2, "never_fits_kv"),  # 33 tokens need 3 blocks
        (200, 2, 100, 2, "never_fits_kv"),  # both: the KV pool is named
    ],
)
def test_refusal(inp, out, budget, num_blocks, want):
    s = sched(max_num_seqs=1, max_num_batched_tokens=budget)
    assert s.refusal(Request(0, 0, 0.0, inp, out), num_blocks, BS) == want


def test_a_prefill_replica_holds_the_prompt_only():
    s = sched(max_num_seqs=1, max_num_batched_tokens=100)
    req = Request(0, 0, 0.0, 32, 50)  # 81 tokens at most: 6 blocks; the prompt: 2
    assert s.refusal(req, 2, BS) == "never_fits_kv"
    assert s.refusal(req, 2, BS, prompt_only=True) is None


def test_empty_view_gives_empty_plan():
    plan = sched().plan(view())
    assert plan.empty
    assert plan.preempt == []
