"""Prefix caches on hand-built requests (no SimPy), the shared-prefix workloads, and
end-to-end hits computed by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lyra_simpy import simulate
from lyra_simpy.engine.kv import BlockPool
from lyra_simpy.engine.request import Request
from lyra_simpy.errors import ScenarioError, SimulationError
from lyra_simpy.policies.prefix_cache import (
    BlockHashCache,
    BlockHashConfig,
    RadixCache,
    max_hit_units,
)
from lyra_simpy.workload.prefixes import (
    ConversationPrefix,
    SystemPromptPrefix,
    conversation_keys,
    reuse_bound,
    system_prompt_keys,
    trace_keys,
)

UNIT = 16  # one block per unit


def req(keys, input_tokens=None, computed=0) -> Request:
    r = Request(0, 0, 0.0, input_tokens or UNIT * len(keys) + 1, 8)
    r.keys = tuple(keys)
    r.computed_tokens = computed
    return r


def cached(cache, keys, computed=None) -> Request:
    """A request that computed *keys* and put them in *cache* (still running)."""
    r = req(keys)
    assert cache.insert(r, len(keys)) == 0
    return r


@pytest.fixture(params=[BlockHashCache, RadixCache], ids=["block_hash", "radix"])
def cache(request):
    return request.param(UNIT, 16)


def test_lookup_walks_the_prefix_and_counts_unreferenced_units(cache):
    a = cached(cache, [1, 2, 3])
    assert cache.units == 3
    assert cache.lookup(req([1, 2, 9, 4])) == (2, 0)  # stops at the first miss; a holds them
    assert cache.release(a) == 3  # all three become evictable
    assert cache.evictable_blocks == 3
    assert cache.lookup(req([1, 2, 9, 4])) == (2, 2)
    assert cache.lookup(req([7, 1, 2])) == (0, 0)  # a prefix, not any substring


def test_a_hit_leaves_the_last_token_to_compute(cache):
    cached(cache, [1, 2])
    # 32 tokens: both units cached, but one token must be computed → 1 unit
    assert max_hit_units(req([1, 2], input_tokens=32), UNIT) == 1
    assert cache.lookup(req([1, 2], input_tokens=32)) == (1, 0)
    assert cache.lookup(req([1, 2], input_tokens=33)) == (2, 0)


def test_acquire_moves_free_units_to_used_and_release_returns_them(cache):
    cache.release(cached(cache, [1, 2, 3]))
    b = req([1, 2, 5])
    assert cache.acquire(b, 2) == 2  # two evictable blocks become used
    assert cache.evictable_blocks == 1
    c = req([1, 2, 6])
    assert cache.acquire(c, 2) == 0  # already referenced by b
    assert cache.release(b) == 0  # c still holds them
    assert cache.release(c) == 2
    assert cache.evictable_blocks == 3


def test_units_in_use_are_never_evicted(cache):
    a = cached(cache, [1, 2, 3])
    b = cached(cache, [4, 5])
    cache.release(b)
    cache.evict(100)
    assert cache.units == 3  # only b's free units went
    assert cache.lookup(req([1, 2, 3, 9])) == (3, 0)
    cache.release(a)
    cache.evict(100)
    assert cache.units == 0
    assert cache.evictable_blocks == 0


def test_computing_a_cached_unit_again_shares_it_and_frees_the_copy(cache):
    a = cached(cache, [1, 2])
    b = req([1, 2, 3])
    assert cache.insert(b, 3) == -2  # units 1 and 2 existed: b's copies are freed
    assert cache.units == 3
    assert cache.release(a) == 0
    assert cache.release(b) == 3


def test_release_twice_is_an_engine_bug(cache):
    a = cached(cache, [1])
    held = list(a.held)
    cache.release(a)
    a.held = held
    with pytest.raises(SimulationError, match="released twice"):
        cache.release(a)


def test_block_hash_evicts_in_free_order_tail_first():
    cache = BlockHashCache(UNIT, 16)
    cache.release(cached(cache, [1, 2, 3]))  # freed tail first: 3, 2, 1
    cache.release(cached(cache, [7]))
    cache.evict(1)
    assert cache.lookup(req([1, 2, 3, 0])) == (2, 2)  # unit 3 went first
    cache.evict(2)
    assert cache.lookup(req([1, 2, 3, 0])) == (0, 0)
    assert cache.lookup(req([7, 0])) == (1, 1)  # freed later: still there


def test_radix_evicts_the_least_recent_leaf_and_parents_after_children():
    cache = RadixCache(UNIT, 16)
    cache.release(cached(cache, [1, 2]))  # branch 1 → 2
    cache.release(cached(cache, [1, 3]))  # branch 1 → 3 (more recent)
    cache.evict(1)
    assert cache.lookup(req([1, 2, 0])) == (1, 1)  # leaf 2 (older) went
    assert cache.lookup(req([1, 3, 0])) == (2, 2)
    cache.lookup(req([1, 3, 0]))  # a match refreshes 1 and 3 (SGLang)
    cache.evict(1)
    assert cache.units == 1  # leaf 3 went; 1 is now a leaf
    cache.evict(1)
    assert cache.units == 0


def test_radix_match_refreshes_the_path():
    cache = RadixCache(UNIT, 16)
    cache.release(cached(cache, [1]))
    cache.release(cached(cache, [2]))
    cache.lookup(req([1, 0]))  # 1 is now the most recent
    cache.evict(1)
    assert cache.lookup(req([1, 0])) == (1, 1)
    assert cache.lookup(req([2, 0])) == (0, 0)


# -- workloads ----------------------------------------------------------------------------


def test_system_prompts_are_prepended_and_share_their_whole_units():
    rng = np.random.default_rng(1)
    cfg = SystemPromptPrefix(groups=2, prefix_tokens=40, share=1.0)
    inp, keys = system_prompt_keys(cfg, rng, np.array([10, 30, 5, 17]), UNIT)
    np.testing.assert_array_equal(inp, [50, 70, 45, 57])
    assert [len(k) for k in keys] == [3, 4, 2, 3]  # whole units of each prompt
    rng = np.random.default_rng(1)
    rng.random(4)
    group = rng.integers(0, 2, size=4)
    for i in range(4):
        for j in range(4):
            same = group[i] == group[j]
            # 2 whole units of the 40-token prompt are shared; the third mixes user text
            assert (keys[i][:2] == keys[j][:2]) == bool(same)
            if i != j:
                assert keys[i][2:3] != keys[j][2:3]


def test_conversation_turns_carry_the_history():
    cfg = ConversationPrefix(turns=2, concurrent=2)
    inp, keys = conversation_keys(cfg, np.array([20, 30, 10, 5, 7]), np.array([12, 4, 6, 9, 3]), 8)
    # slot 0: turns 0 and 2 (one conversation), then arrival 4 starts a new one
    np.testing.assert_array_equal(inp, [20, 30, 20 + 12 + 10, 30 + 4 + 5, 7])
    assert keys[2][: (20 + 12) // 8] == keys[0]  # turn 2 reuses prompt and answer of turn 0
    assert keys[3][:4] == keys[1][:4]
    assert keys[4][0] != keys[0][0]  # a new conversation shares nothing


def test_trace_keys_cover_whole_blocks_only():
    keys = trace_keys([(0, 1, 2), (0, 1, 3)], np.array([1100, 1500]), 512)
    assert [len(k) for k in keys] == [2, 2]
    assert keys[0] == keys[1]  # the blocks that differ (2 vs 3) are partial ones


def test_reuse_bound_by_hand():
    keys = [(1, 2, 3), (1, 2, 4), (5,)]
    # request 2 reuses 2 whole units of its 49 tokens; request 3 nothing
    assert reuse_bound(keys, np.array([49, 49, 17]), UNIT) == pytest.approx(32 / 115)


# -- end to end ---------------------------------------------------------------------------


def shared_prompt_scenario(make_scenario, cache: str | None, **changes):
    base = {
        "workload.num_requests": 2,
        "workload.arrival": {"name": "constant", "rate_per_s": 1.0},
        "workload.input_tokens": {"name": "fixed", "tokens": 10},
        "workload.output_tokens": {"name": "fixed", "tokens": 3},
        "workload.prefix": {"name": "system_prompt", "groups": 1, "prefix_tokens": 64},
        "cost": {"name": "linear", "base_ms": 10, "per_prefill_token_ms": 0.5},
        "kv_cache": {"block_size": 16, "num_blocks": 64},
        "prefix_cache": None if cache is None else {"name": cache},
    }
    base.update(changes)
    return simulate(make_scenario(base))


@pytest.mark.parametrize("name", ["block_hash", "radix"])
def test_second_request_prefills_only_what_is_not_cached(make_scenario, name):
    res = shared_prompt_scenario(make_scenario, name)
    r1, r2 = res.requests()
    # both prompts are 64 + 10 tokens; r1 computes all: 10 + 0.5 x 74 = 47 ms
    assert r1["cached_tokens"] == 0
    assert r1["ttft_ms"] == pytest.approx(47.0)
    # r2 arrives after r1 ended and finds the 4 whole blocks of the system prompt
    assert r2["cached_tokens"] == 64
    assert r2["ttft_ms"] == pytest.approx(10 + 0.5 * 10)
    assert res.summary["total_cached_tokens"] == 64
    assert res.summary["prefix_cache_hit_rate"] == pytest.approx(64 / 148)
    assert res.summary["prefix_cache_hit_rate_bound"] == pytest.approx(64 / 148)
    # everything ended: nothing in use, the cached units are free but kept
    assert res.engine["kv_blocks_used_at_end"] == 0
    assert res.engine["prefix_cache_evictable_blocks"] == res.engine["prefix_cache_units"]


def test_without_a_cache_nothing_is_reused(make_scenario):
    res = shared_prompt_scenario(make_scenario, None)
    assert [r["cached_tokens"] for r in res.requests()] == [0, 0]
    assert [r["ttft_ms"] for r in res.requests()] == pytest.approx([47.0, 47.0])
    assert res.summary["prefix_cache_hit_rate"] == 0.0
    assert res.summary["prefix_cache_hit_rate_bound"] == pytest.approx(64 / 148)


def test_the_hit_needs_only_the_blocks_beyond_the_prefix(make_scenario):
    # 5 blocks: r1 holds all 5 (76 tokens); afterwards 4 of them stay cached, and r2
    # runs in them plus the one left
    res = shared_prompt_scenario(make_scenario, "radix", **{"kv_cache.num_blocks": 5})
    assert [r["cached_tokens"] for r in res.requests()] == [0, 64]
    assert res.engine["peak_kv_blocks"] == 5


def test_prefix_cache_needs_an_iteration_level_scheduler(make_scenario):
    with pytest.raises(ScenarioError, match="prefix_cache: got a cache with scheduler 'static'"):
        make_scenario({"scheduler": {"name": "static"}, "prefix_cache": {"name": "radix"}})


def test_trace_prefix_needs_a_mooncake_trace(make_scenario):
    with pytest.raises(ScenarioError, match="prefix 'trace' needs a mooncake trace"):
        make_scenario({"workload.prefix": {"name": "trace"}})


def test_trace_unit_must_be_whole_blocks(make_scenario, tmp_path: Path):
    (tmp_path / "m.jsonl").write_text(
        '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
    )
    with pytest.raises(ScenarioError, match=r"unit_tokens: got 500, must be a multiple"):
        make_scenario(
            {
                "workload.num_requests": None,
                "workload.arrival": {"name": "trace", "path": "m.jsonl", "format": "mooncake"},
                "workload.input_tokens": {"name": "trace"},
                "workload.output_tokens": {"name": "trace"},
                "workload.prefix": {"name": "trace", "unit_tokens": 500},
                "prefix_cache": {"name": "block_hash"},
            },
            base_dir=tmp_path,
        )


def test_preempting_a_request_frees_only_what_nobody_else_uses():
    from lyra_simpy.policies.base import EngineView, preempt_gain

    cache = BlockHashCache(UNIT, 16)
    a = cached(cache, [1, 2])  # a running request holding units 1, 2
    b = req([1, 2, 3])
    cache.acquire(b, 2)
    b.blocks = 3  # 2 shared units + 1 block of its own
    view = EngineView(0.0, [], [a, b], 0, 16, False, None, cache)
    assert preempt_gain(view, b, {}) == 1  # a still uses the shared units
    dropped: dict[int, int] = {}
    a.blocks = 2
    assert preempt_gain(view, b, dropped) == 1
    assert preempt_gain(view, a, dropped) == 2  # preempted together: the units go too


def test_conversation_turns_sharing_running_units_never_overfill_the_pool(make_scenario):
    # found by the property tests: a turn that hits the units of a running turn, then
    # preempted, must not count the shared units as freed
    raw = {
        "workload.num_requests": 11,
        "workload.arrival": {"name": "poisson", "rate_per_s": 6.0},
        "workload.input_tokens": {"name": "fixed", "tokens": 3},
        "workload.output_tokens": {"name": "fixed", "tokens": 11},
        "workload.prefix": {"name": "conversation", "turns": 3, "concurrent": 1},
        "scheduler": {"name": "chunked_prefill", "max_num_seqs": 3, "max_num_batched_tokens": 3},
        "kv_cache": {"block_size": 2, "num_blocks": 25},
        "cost": {"name": "linear", "base_ms": 1.0, "per_seq_ms": 1.0, "padding": "max_batch"},
        "prefix_cache": {"name": "block_hash"},
        "seed": 0,
    }
    fused = simulate(make_scenario(raw))
    unfused = simulate(make_scenario({**raw, "simulation.fuse_iterations": False}))
    assert list(fused.requests()) == list(unfused.requests())
    assert fused.summary["completed"] == 11
    assert fused.summary["total_preemptions"] > 0
    assert fused.summary["total_cached_tokens"] > 0
    assert fused.engine["peak_kv_blocks"] <= 25


@pytest.mark.parametrize(
    ("eviction", "cached_after_c", "hit_units"), [("free_queue", 1, 1), ("when_full", 2, 2)]
)
def test_free_queue_eviction_against_when_full_by_hand(eviction, cached_after_c, hit_units):
    """Pool of 4 one-token blocks, one block per unit (issue 13).

    A (prompt a1 a2) runs and ends: its units join the free queue tail first (a2, a1)
    behind the two never-used blocks. B (no prefix, 2 blocks) takes those two and frees
    them after A's units. C needs 1 block. vLLM's single free queue hands out the oldest
    free block, a2's, evicting it though two uncached blocks are free; ``when_full``
    evicts nothing (1 used + 2 cached <= 4). D (prompt a1 a2 d3) then hits a1 only under
    ``free_queue``, a1 a2 under ``when_full``."""
    cache = BlockHashCache(1, 1, BlockHashConfig(eviction=eviction))
    pool = BlockPool(4, 1)
    pool.attach(cache)
    a = Request(0, 0, 0.0, 2, 1, keys=[11, 12])
    pool.allocate(2)  # A's prompt
    pool.release(-cache.insert(a, 2))  # its full units are cached as computed
    pool.release(cache.release(a))  # A ends: a2 then a1 become free
    assert (pool.used, cache.evictable_blocks, pool.free) == (0, 2, 4)
    pool.allocate(2)  # B
    pool.release(2)  # B ends
    pool.allocate(1)  # C
    assert cache.evictable_blocks == cached_after_c
    assert (pool.used, pool.free) == (1, 3)
    d = Request(3, 3, 0.0, 3, 1, keys=[11, 12, 13])
    assert cache.lookup(d) == (hit_units, hit_units)


def test_free_queue_takes_never_used_blocks_first():
    cache = BlockHashCache(1, 1)  # free_queue by default, as vLLM
    pool = BlockPool(4, 1)
    pool.attach(cache)
    a = Request(0, 0, 0.0, 2, 1, keys=[11, 12])
    pool.allocate(2)
    pool.release(-cache.insert(a, 2))
    pool.release(cache.release(a))
    pool.allocate(2)  # the two never-used blocks: nothing evicted
    assert cache.evictable_blocks == 2
    pool.allocate(1)  # now the oldest free block is a2's (freed before a1's)
    assert cache.lookup(Request(1, 1, 0.0, 3, 1, keys=[11, 12, 13])) == (1, 1)
