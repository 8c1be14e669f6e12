"""Iterations that cost nothing (issue 13): every linear coefficient defaults to 0, so a
decode or prefill step may take no time. The engine serves them the same fused and
stepped, and no time stamp serves as a sentinel (a chunk ending at t = 0 is not a token)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lyra_simpy import simulate

SCHEDULERS = [
    {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 256},
    {"name": "chunked_prefill", "max_num_seqs": 4, "max_num_batched_tokens": 16},
    {"name": "prefill_first", "max_running_requests": 4, "chunked_prefill_size": 8,
     "max_prefill_tokens": 16},
    {"name": "prefill_first", "max_running_requests": 4, "chunked_prefill_size": 8,
     "max_prefill_tokens": 16, "enable_mixed_chunk": True},
    {"name": "static", "max_batch": 3},
]  # fmt: skip
COSTS = [
    {"name": "linear"},
    {"name": "linear", "per_prefill_token_ms": 1.0},  # decodes free, prefills not
    {"name": "linear", "per_seq_ms": 1e-9},  # tiny: rounds away at later times
]


def _rows(res):
    return [json.dumps(r, allow_nan=False) for r in res.requests()]


@pytest.mark.parametrize("cost", COSTS, ids=["zero", "free_decode", "tiny"])
@pytest.mark.parametrize("sched", SCHEDULERS, ids=lambda s: s["name"])
def test_free_iterations_fused_equal_stepped(make_scenario, sched, cost):
    changes = {"scheduler": sched, "cost": cost, "kv_cache.num_blocks": 16}
    fused = simulate(make_scenario({**changes, "simulation.fuse_iterations": True}))
    stepped = simulate(make_scenario({**changes, "simulation.fuse_iterations": False}))
    assert _rows(fused) == _rows(stepped)
    assert fused.summary == stepped.summary
    rec = fused.records
    ok = rec["status"] == "ok"
    assert ok.all()
    assert np.isfinite(rec["first_token_s"][ok]).all()  # no ok without a first token
    assert (rec["first_token_s"][ok] <= rec["finish_s"][ok]).all()
    json.dumps(fused.summary, allow_nan=False)


def test_sglang_chunk_ending_at_time_zero_is_not_a_token(make_scenario):
    # every prompt needs several chunks of 8 tokens, all at t = 0: only the last one
    # emits the first token
    sc = make_scenario(
        {
            "scheduler": SCHEDULERS[2],
            "cost": {"name": "linear"},
            "workload.arrival": {"name": "constant", "rate_per_s": 1e9},
            "workload.input_tokens": {"name": "fixed", "tokens": 30},
            "workload.output_tokens": {"name": "fixed", "tokens": 3},
        }
    )
    res = simulate(sc)
    assert (res.records["status"] == "ok").all()
    assert np.isfinite(res.records["ttft_ms"]).all()
    assert res.summary["total_output_tokens"] == 36
