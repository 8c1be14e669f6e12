"""Chunked prefill (vLLM stall-free) and prefill-first (SGLang) on hand-built views, plus
end-to-end timings computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import BS, decoding_req, trace_workload, waiting_req
from lyra_simpy import simulate
from lyra_simpy.engine.kv import blocks_for
from lyra_simpy.engine.request import Request
from lyra_simpy.errors import ScenarioError
from lyra_simpy.policies import (
    ChunkedPrefill,
    ChunkedPrefillConfig,
    EngineView,
    PrefillFirst,
    PrefillFirstConfig,
)


def partial_req(i: int, input_tokens: int, computed: int) -> Request:
    """A running request part-way through its prompt."""
    return Request(
        i, i, float(i), input_tokens, 8, computed_tokens=computed,
        blocks=blocks_for(computed, BS), running=True,
    )  # fmt: skip


def view(waiting=(), running=(), free_blocks=1000, decode_blocks=None) -> EngineView:
    return EngineView(10.0, list(waiting), list(running), free_blocks, BS, True, decode_blocks)


def chunked(**kw) -> ChunkedPrefill:
    kw.setdefault("max_num_seqs", 8)
    kw.setdefault("max_num_batched_tokens", 32)
    return ChunkedPrefill(ChunkedPrefillConfig(**kw))


def sglang(**kw) -> PrefillFirst:
    return PrefillFirst(PrefillFirstConfig(**kw))


# -- chunked prefill (vLLM) ---------------------------------------------------------------


def test_decodes_first_then_a_chunk_fills_the_budget():
    d = [decoding_req(0, 10, 3), decoding_req(1, 20, 5)]
    a = waiting_req(2, 100)
    plan = chunked().plan(view(waiting=[a], running=d))
    assert plan.decode == d
    assert plan.prefill == [(a, 30)]  # 32 - 2 decodes


def test_running_partial_prefill_continues_after_the_decodes():
    d = decoding_req(0, 10, 3)
    p = partial_req(1, 100, 30)
    b = waiting_req(2, 5)
    plan = chunked().plan(view(waiting=[b], running=[d, p]))
    assert plan.decode == [d]
    assert plan.prefill == [(p, 31)]  # budget spent: b waits
    # the last chunk leaves room for the next prompt
    p2 = partial_req(1, 100, 90)
    plan = chunked().plan(view(waiting=[b], running=[d, p2]))
    assert plan.prefill == [(p2, 10), (b, 5)]


def test_a_request_without_budget_is_skipped_not_preempted():
    p = partial_req(0, 100, 0)  # admitted first, so it is served first
    d = decoding_req(1, 10, 3)
    plan = chunked(max_num_batched_tokens=8, max_num_seqs=2).plan(view(running=[p, d]))
    assert plan.prefill == [(p, 8)]
    assert plan.decode == []
    assert plan.preempt == []


def test_long_prefill_token_threshold_caps_each_chunk():
    a, b = waiting_req(0, 100), waiting_req(1, 100)
    plan = chunked(long_prefill_token_threshold=12).plan(view(waiting=[a, b]))
    assert plan.prefill == [(a, 12), (b, 12)]


def test_chunk_needs_kv_blocks_or_admission_stops():
    a = waiting_req(0, 100)
    plan = chunked().plan(view(waiting=[a], free_blocks=1))
    assert plan.prefill == []  # 32 tokens need 2 blocks
    plan = chunked().plan(view(waiting=[a], free_blocks=2))
    assert plan.prefill == [(a, 32)]


def test_chunked_accepts_prompts_longer_than_the_budget():
    s = chunked(max_num_batched_tokens=32)
    assert s.refusal(waiting_req(0, 1000, 10), num_blocks=64, block_size=BS) is None
    assert s.refusal(waiting_req(0, 1020, 10), num_blocks=64, block_size=BS) == "never_fits_kv"
    # a prefill replica holds the prompt only
    assert s.refusal(waiting_req(0, 1020, 10), 64, BS, prompt_only=True) is None


def test_preemption_still_takes_the_newest_and_blocks_admission():
    a = decoding_req(0, 15, 2)  # 16 computed: needs a new block
    b = decoding_req(1, 10, 2)
    w = waiting_req(2, 4)
    plan = chunked().plan(view(waiting=[w], running=[a, b], free_blocks=0))
    assert plan.preempt == [b]
    assert plan.decode == [a]
    assert plan.prefill == []


# -- prefill-first (SGLang) -----------------------------------------------------------------


def test_prefill_iteration_runs_without_the_decodes():
    d = [decoding_req(0, 10, 3), decoding_req(1, 20, 5)]
    a = waiting_req(2, 50)
    plan = sglang().plan(view(waiting=[a], running=d))
    assert plan.prefill == [(a, 50)]
    assert plan.decode == []


def test_nothing_to_prefill_decodes_everyone():
    d = [decoding_req(0, 10, 3), decoding_req(1, 20, 5)]
    plan = sglang().plan(view(running=d, decode_blocks=0))
    assert plan.decode == d
    assert plan.prefill == []


def test_mixed_chunk_takes_the_decodes_out_of_the_chunk_budget():
    d = [decoding_req(0, 10, 3), decoding_req(1, 20, 5)]
    a = waiting_req(2, 500)
    plan = sglang(chunked_prefill_size=64, enable_mixed_chunk=True).plan(
        view(waiting=[a], running=d)
    )
    assert plan.decode == d
    # 64 - 2 decode tokens = 62, cut to whole pages of 16
    assert plan.prefill == [(a, 48)]


def test_long_prompt_is_chunked_and_ends_the_batch_then_goes_on_first():
    a, b = waiting_req(0, 100), waiting_req(1, 5)
    s = sglang(chunked_prefill_size=64)
    plan = s.plan(view(waiting=[a, b]))
    assert plan.prefill == [(a, 64)]
    p = partial_req(0, 100, 64)
    plan = s.plan(view(waiting=[b], running=[p]))
    assert plan.prefill == [(p, 36), (b, 5)]


def test_first_request_may_exceed_max_prefill_tokens_the_next_may_not():
    a, b = waiting_req(0, 300), waiting_req(1, 10)
    plan = sglang(chunked_prefill_size=None, max_prefill_tokens=256).plan(view(waiting=[a, b]))
    assert plan.prefill == [(a, 300)]


def test_kv_check_reserves_the_running_requests_future_tokens():
    d = decoding_req(0, 10, 1, output_tokens=1001)  # 1000 tokens still to come
    a = waiting_req(1, 32, output_tokens=16)
    s = sglang(new_token_ratio=0.5)
    # 40 free blocks = 640 tokens; 0.5 x 1000 reserved leaves 140 >= 32 + 16
    assert s.plan(view(waiting=[a], running=[d], free_blocks=40)).prefill == [(a, 32)]
    # 30 free blocks = 480 tokens; 480 - 500 < 48: no prefill, so the decode runs
    plan = s.plan(view(waiting=[a], running=[d], free_blocks=30))
    assert plan.prefill == []
    assert plan.decode == [d]


def test_retraction_takes_fewest_outputs_then_longest_prompt_and_requeues_at_the_back():
    a = decoding_req(0, 15, 2)  # needs a block (16 computed)
    b = decoding_req(1, 31, 2)  # needs a block (32 computed), longer prompt
    c = decoding_req(2, 47, 9)  # 55 computed: no new block
    plan = sglang().plan(view(running=[a, b, c], free_blocks=0))
    assert plan.preempt_to_back
    assert plan.preempt == [b]  # 2 outputs like a, longer prompt; its 2 blocks suffice
    assert plan.decode == [a, c]


def test_retraction_keeps_at_least_one_request():
    a = decoding_req(0, 15, 2)
    plan = sglang().plan(view(running=[a], free_blocks=0))
    assert plan.preempt == []
    assert plan.empty


def test_sglang_accepts_needs_prompt_and_output_in_the_pool():
    # its KV check counts the prompt, what was generated and the rest of the output
    s = sglang(clip_max_new_tokens=100)
    assert s.refusal(waiting_req(0, 900, 124), num_blocks=64, block_size=BS) is None  # 1024
    assert s.refusal(waiting_req(0, 900, 125), num_blocks=64, block_size=BS) == "never_fits_kv"


def test_a_retracted_request_can_always_come_back_on_an_idle_replica():
    # retracted after 9 of 19 tokens: 3 + 9 to prefill again, 10 still to come
    r = Request(0, 0, 0.0, 3, 19, generated_tokens=9, preemptions=1)
    s = PrefillFirst(PrefillFirstConfig(clip_max_new_tokens=16, chunked_prefill_size=None))
    assert s.refusal(r, num_blocks=22, block_size=1) is None
    plan = s.plan(EngineView(0.0, [r], [], 22, 1, False))
    assert plan.prefill == [(r, 12)]


def test_chunk_size_must_be_whole_pages(make_scenario):
    with pytest.raises(ScenarioError, match=r"chunked_prefill_size: got 100, must be a multiple"):
        make_scenario({"scheduler": {"name": "prefill_first", "chunked_prefill_size": 100}})


# -- end to end ---------------------------------------------------------------------------


def two_requests(make_scenario, tmp_path: Path, scheduler: dict) -> list[dict]:
    """A decoding request, then a 100-token prompt arriving while it decodes."""
    sc = make_scenario(
        {
            **trace_workload(tmp_path, [(0, 8, 20), (0.05, 100, 2)]),
            "scheduler": scheduler,
            "cost": {"name": "linear", "base_ms": 10, "per_prefill_token_ms": 0.1},
        },
        base_dir=tmp_path,
    )
    return list(simulate(sc).requests())


def test_stall_free_chunks_ride_along_with_the_decodes(make_scenario, tmp_path):
    sched = {"name": "chunked_prefill", "max_num_seqs": 4, "max_num_batched_tokens": 41}
    r1, r2 = two_requests(make_scenario, tmp_path, sched)
    # r1: prefill 10.8 ms, then decodes of 10 ms; r2 arrives at 50 ms (mid-iteration)
    # and joins at 50.8 ms with chunks of 40, 40, 20 tokens (14, 14, 12 ms) next to r1's
    # decodes: r1 pays only the chunks' 4 + 4 + 2 ms
    assert r2["first_token_s"] == pytest.approx(0.0508 + 0.014 + 0.014 + 0.012)
    assert r1["e2el_ms"] == pytest.approx(10.8 + 19 * 10 + 10)


def test_prefill_first_stalls_decodes_for_the_whole_prompt(make_scenario, tmp_path):
    sched = {"name": "prefill_first", "chunked_prefill_size": 48}
    r1, r2 = two_requests(make_scenario, tmp_path, sched)
    # the prompt's chunks (48, 48, 4 tokens: 14.8, 14.8, 10.4 ms) run back to back,
    # prefill only, while r1 waits
    assert r2["first_token_s"] == pytest.approx(0.0508 + 0.0148 + 0.0148 + 0.0104)
    assert r1["e2el_ms"] == pytest.approx(10.8 + 19 * 10 + 40)


def test_unlimited_budget_chunking_equals_no_chunking(make_scenario):
    big = {"max_num_seqs": 4, "max_num_batched_tokens": 100_000}
    a = simulate(make_scenario({"scheduler": {"name": "continuous", **big}}))
    b = simulate(make_scenario({"scheduler": {"name": "chunked_prefill", **big}}))
    assert list(a.requests()) == list(b.requests())
    assert a.summary == b.summary


def test_when_retracting_decodes_is_not_enough_the_chunked_prompt_goes_back():
    d = decoding_req(0, 15, 2)  # needs a block
    p = partial_req(1, 100, 64)  # a prompt part-way through its chunks holds the rest
    plan = sglang(chunked_prefill_size=64).plan(view(running=[d, p], free_blocks=0))
    assert plan.preempt == [p]
    assert plan.preempt_to_back
    assert plan.decode == [d]
