"""DecodeSet aggregates against brute force, and the engine's path for schedulers that
let decoding requests skip an iteration (prefill-first, as SGLang runs by default)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lyra_simpy import simulate
from lyra_simpy.engine.decode_clock import DecodeSet
from lyra_simpy.engine.request import Request
from lyra_simpy.policies import SCHEDULERS, BatchPlan, ContinuousBatching, EngineView

BS = 4


def decoding(i: int, inp: int, gen: int, out: int) -> Request:
    return Request(i, i, 0.0, inp, out, computed_tokens=inp + gen - 1, generated_tokens=gen)


def brute(members: list[Request]) -> tuple[int, int, list[int]]:
    context = sum(r.computed_tokens + 1 for r in members)
    need = sum(1 for r in members if r.computed_tokens % BS == 0)
    hist = [sum(1 for r in members if (r.computed_tokens + j) % BS == 0) for j in range(BS)]
    return context, need, hist


def test_aggregates_follow_the_members_through_joins_advances_and_leaves():
    rng = np.random.default_rng(3)
    s = DecodeSet(BS)
    members: list[Request] = []
    t = 0.0
    for step in range(300):
        action = rng.integers(0, 4)
        if action == 0 or not members:
            req = decoding(step, int(rng.integers(1, 30)), int(rng.integers(1, 5)), 60)
            s.join(req)
            members.append(req)
        elif action == 1:
            req = members.pop(int(rng.integers(0, len(members))))
            before = (req.computed_tokens, req.generated_tokens, req.blocks)
            s.leave(req)
            assert req.member_of is None
            assert (req.computed_tokens, req.generated_tokens, req.blocks) == before
        else:
            k = int(rng.integers(1, 6))
            ends = [t + 0.01 * (j + 1) for j in range(k)]
            expect = {id(r): r.output_tokens - r.generated_tokens for r in members}
            done = s.advance(ends)
            t = ends[-1]
            for r in done:
                left = expect[id(r)]
                assert left <= k
                assert r.generated_tokens == r.output_tokens
                assert r.last_token_s == ends[left - 1]
                members.remove(r)
            assert all(expect[id(r)] > k for r in members)
        assert s.n == len(members)
        context, need, hist = brute(members)
        assert s.context_tokens == context
        assert s.blocks_needed() == need
        assert s.hist_now() == hist
        for r in members:
            assert r.blocks == -(-r.computed_tokens // BS)
            assert r.last_token_s == s.last_emit_s or (
                math.isnan(r.last_token_s) and math.isnan(s.last_emit_s)  # none yet
            )
        if members:
            assert s.fewest_left() == min(r.output_tokens - r.generated_tokens for r in members)


class PrefillFirst(ContinuousBatching):
    """Admits waiting requests in iterations of their own, without the decodes."""

    def plan(self, view: EngineView) -> BatchPlan:
        plan = super().plan(view)
        if plan.prefill and any(req not in view.running for req, _ in plan.prefill):
            return BatchPlan(prefill=[(r, t) for r, t in plan.prefill if r not in view.running])
        return plan


#: The tiny scenario (conftest) loaded enough that admissions overlap decoding.
BUSY = {
    "seed": 5,
    "workload.num_requests": 60,
    "workload.output_tokens": {"name": "uniform", "low": 1, "high": 30},
    "scheduler.max_num_seqs": 8,
    "scheduler.max_num_batched_tokens": 512,
    "kv_cache": {"block_size": BS, "num_blocks": 120},
    "cost.per_context_token_ms": 0.01,
}


@pytest.fixture
def prefill_first(monkeypatch):
    monkeypatch.setitem(SCHEDULERS, "continuous", PrefillFirst)


@pytest.mark.usefixtures("prefill_first")
def test_decodes_skipping_an_iteration_are_counted_one_by_one(make_scenario):
    fused = simulate(make_scenario(BUSY))
    unfused = simulate(make_scenario({**BUSY, "simulation.fuse_iterations": False}))
    assert list(fused.requests()) == list(unfused.requests())
    assert fused.summary == unfused.summary
    for name in fused.timeseries:
        np.testing.assert_array_equal(fused.timeseries[name], unfused.timeseries[name])
    rec = fused.records
    assert (rec["status"] == "ok").all()
    ts = fused.timeseries
    # prefill-only iterations happened while others were decoding...
    prefill_only = (ts["prefill_tokens"] > 0) & (ts["decode_seqs"] == 0)
    assert prefill_only.any()
    # ...so some gaps between tokens span two iterations: the pooled ITL has values
    # longer than any single iteration.
    values, weights = fused.itl_s
    assert values.max() > (ts["end_s"] - ts["start_s"]).max()
    assert int(weights.sum()) == int((rec["output_tokens"] - 1).sum())
