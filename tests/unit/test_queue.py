"""Queue policies on hand-built views (no SimPy), and one engine-level check."""

from __future__ import annotations

import pytest

from lyra_simpy import scenario_from_dict, simulate
from lyra_simpy.engine.request import Request
from lyra_simpy.policies import (
    ContinuousBatching,
    ContinuousConfig,
    EngineView,
    StaticBatching,
    StaticConfig,
)
from lyra_simpy.policies.queue import ordered

BS = 16


def req(i: int, input_tokens: int, arrival_s: float | None = None) -> Request:
    return Request(i, i, float(i) if arrival_s is None else arrival_s, input_tokens, 8)


def view(waiting, running=(), free_blocks=1000, pending=True) -> EngineView:
    return EngineView(10.0, list(waiting), list(running), free_blocks, BS, pending)


def test_fcfs_returns_the_queue_itself():
    w = [req(0, 50), req(1, 10)]
    assert ordered(w, "fcfs") is w


def test_shortest_prompt_first_sorts_by_prompt_then_arrival_then_index():
    a, b, c, d = req(0, 50), req(1, 10), req(2, 10, arrival_s=0.5), req(3, 30)
    e = req(4, 10, arrival_s=0.5)  # same prompt and arrival as c: index decides
    assert ordered([a, b, c, d, e], "shortest_prompt_first") == [c, e, b, d, a]


def test_preempted_request_keeps_its_own_key():
    # A preempted request sits at the engine queue's front but has generated tokens:
    # under shortest_prompt_first it is ordered by its prompt, not moved to the front.
    preempted = Request(0, 0, 0.0, 40, 8, generated_tokens=5, preemptions=1)
    short = req(1, 20)
    assert ordered([preempted, short], "shortest_prompt_first") == [short, preempted]
    assert ordered([preempted, short], "fcfs") == [preempted, short]


@pytest.mark.parametrize("policy", ["fcfs", "shortest_prompt_first"])
def test_continuous_admits_in_queue_order(policy):
    w = [req(0, 300), req(1, 40), req(2, 100)]
    cfg = ContinuousConfig(max_num_seqs=2, max_num_batched_tokens=512, queue_policy=policy)
    plan = ContinuousBatching(cfg).plan(view(w))
    got = [(r.index, t) for r, t in plan.prefill]
    assert got == ([(0, 300), (1, 40)] if policy == "fcfs" else [(1, 40), (2, 100)])


def test_shortest_prompt_first_keeps_head_of_line_within_its_order():
    # 40 and 100 fit the budget of 160, 300 does not: admission stops there.
    w = [req(0, 300), req(1, 100), req(2, 40)]
    cfg = ContinuousConfig(
        max_num_seqs=8, max_num_batched_tokens=160, queue_policy="shortest_prompt_first"
    )
    plan = ContinuousBatching(cfg).plan(view(w))
    assert [(r.index, t) for r, t in plan.prefill] == [(2, 40), (1, 100)]


def test_static_forms_its_batch_in_queue_order():
    w = [req(0, 300), req(1, 40), req(2, 100)]
    for policy, want in (("fcfs", [0, 1]), ("shortest_prompt_first", [1, 2])):
        sched = StaticBatching(StaticConfig(max_batch=2, queue_policy=policy))
        plan = sched.plan(view(w))
        assert [r.index for r, _ in plan.prefill] == want


def test_static_max_wait_clock_is_the_oldest_request():
    w = [req(0, 300, arrival_s=9.0), req(1, 40, arrival_s=9.5)]
    cfg = StaticConfig(max_batch=4, max_wait_ms=500, queue_policy="shortest_prompt_first")
    plan = StaticBatching(cfg).plan(EngineView(9.2, w, [], 1000, BS, True))
    assert plan.empty
    assert plan.wait_until_s == pytest.approx(9.5)  # 9.0 + 0.5 s, not 9.5 + 0.5 s


def _engine_run(trace, policy: str):
    raw = {
        "workload": {
            "arrival": {"name": "trace", "path": str(trace), "format": "csv"},
            "input_tokens": {"name": "trace"},
            "output_tokens": {"name": "trace"},
        },
        "scheduler": {"name": "continuous", "max_num_seqs": 1, "queue_policy": policy},
        "kv_cache": {"block_size": 16, "num_blocks": 100},
        "cost": {"name": "linear", "base_ms": 5.0, "per_prefill_token_ms": 0.01},
    }
    return simulate(scenario_from_dict(raw)).records


def test_engine_admits_the_shorter_prompt_first(tmp_path):
    # Request 0 takes the only slot; 1 (long prompt) and 2 (short) queue behind it.
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,400,20\n0.01,300,20\n0.02,20,20\n")
    fcfs = _engine_run(trace, "fcfs")
    spf = _engine_run(trace, "shortest_prompt_first")
    assert list(fcfs["first_token_s"].argsort()) == [0, 1, 2]
    assert list(spf["first_token_s"].argsort()) == [0, 2, 1]
    assert spf["ttft_ms"][2] < fcfs["ttft_ms"][2]
    assert spf["ttft_ms"][1] > fcfs["ttft_ms"][1]
    assert (spf["status"] == "ok").all()
