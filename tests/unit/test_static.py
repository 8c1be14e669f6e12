"""StaticBatching.plan / refusal on hand-built views (no SimPy)."""

from __future__ import annotations

import pytest

from lyra_simpy import simulate
from lyra_simpy.engine.request import Request
from lyra_simpy.policies import EngineView, StaticBatching, StaticConfig

BS = 16


def req(i: int, arrival_s: float, inp: int = 16, out: int = 16) -> Request:
    return Request(i, i, arrival_s, inp, out)


def view(waiting=(), running=(), now_s=0.0, pending=True, free_blocks=1000) -> EngineView:
    return EngineView(now_s, list(waiting), list(running), free_blocks, BS, pending)


def static(max_batch: int = 4, max_wait_ms: float | None = None) -> StaticBatching:
    return StaticBatching(StaticConfig(max_batch=max_batch, max_wait_ms=max_wait_ms))


def test_waits_until_oldest_arrival_plus_max_wait():
    s = static(max_batch=4, max_wait_ms=100)
    w = [req(0, 1.0), req(1, 1.02)]
    plan = s.plan(view(w, now_s=1.05))
    assert plan.empty
    assert plan.wait_until_s == pytest.approx(1.1, abs=1e-12)


def test_starts_partial_batch_at_the_deadline():
    s = static(max_batch=4, max_wait_ms=100)
    w = [req(0, 1.0), req(1, 1.02)]
    plan = s.plan(view(w, now_s=1.0 + 0.1))
    assert plan.prefill == [(w[0], 16), (w[1], 16)]


def test_without_max_wait_waits_for_the_next_arrival():
    plan = static(max_batch=4).plan(view([req(0, 0.0)], now_s=5.0))
    assert plan.empty
    assert plan.wait_until_s is None


def test_starts_partial_batch_when_no_arrival_is_pending():
    w = [req(0, 0.0, inp=5), req(1, 0.5, inp=7)]
    plan = static(max_batch=4, max_wait_ms=1e6).plan(view(w, now_s=0.6, pending=False))
    assert plan.prefill == [(w[0], 5), (w[1], 7)]


def test_full_batch_takes_first_max_batch_in_fcfs_order():
    w = [req(i, 0.1 * i) for i in range(6)]
    plan = static(max_batch=4).plan(view(w, now_s=0.5))
    assert [r for r, _ in plan.prefill] == w[:4]
    assert plan.decode == []


def test_rows_stay_at_batch_size_while_members_finish():
    s = static(max_batch=4)
    w = [req(i, 0.0) for i in range(3)]
    s.plan(view(w, now_s=0.0, pending=False))
    for r in w:
        r.running = True
    plan = s.plan(view([req(9, 0.1)], running=w, now_s=1.0))
    assert plan.decode == w
    assert plan.rows == 3
    plan = s.plan(view([req(9, 0.1)], running=w[1:], now_s=2.0))
    assert plan.decode == w[1:]
    assert plan.rows == 3  # the finished member's row is still charged
    assert plan.prefill == []  # waiting requests wait for the whole batch


def test_reserves_full_lengths_in_kv():
    # each member needs blocks_for(16 + 33) = 4 blocks although its prompt is 1 block
    w = [req(i, 0.0, inp=16, out=33) for i in range(4)]
    plan = static(max_batch=4).plan(view(w, now_s=0.0, free_blocks=11))
    assert [r for r, _ in plan.prefill] == w[:2]
    plan = static(max_batch=4).plan(view(w, now_s=0.0, free_blocks=12))
    assert len(plan.prefill) == 3


def test_empty_queue_gives_empty_plan():
    plan = static().plan(view())
    assert plan.empty
    assert plan.wait_until_s is None


@pytest.mark.parametrize(("inp", "out", "ok"), [(16, 16, True), (16, 17, False), (1, 31, True)])
def test_refuses_what_does_not_fit_full_length_in_kv(inp, out, ok):
    want = None if ok else "never_fits_kv"
    assert static().refusal(Request(0, 0, 0.0, inp, out), 2, BS) == want
    # a batch reserves the full length on a prefill replica too
    assert static().refusal(Request(0, 0, 0.0, inp, out), 2, BS, prompt_only=True) == want


def test_one_prefill_per_iteration_fills_the_batch_before_it_decodes():
    s = StaticBatching(StaticConfig(max_batch=4, prefills_per_iteration=1))
    w = [req(i, 0.0, inp=10 + i) for i in range(3)]
    plan = s.plan(view(w, now_s=0.1, pending=False))
    assert (plan.prefill, plan.decode, plan.rows) == ([(w[0], 10)], [], 3)
    # the members not yet prefilled are still waiting; the prefilled one does not decode
    plan = s.plan(view(w[1:], running=w[:1], now_s=0.2, pending=False))
    assert (plan.prefill, plan.decode, plan.rows) == ([(w[1], 11)], [], 3)
    plan = s.plan(view(w[2:], running=w[:2], now_s=0.3, pending=False))
    assert (plan.prefill, plan.decode) == ([(w[2], 12)], [])
    plan = s.plan(view([], running=w, now_s=0.4, pending=False))
    assert (plan.prefill, plan.decode, plan.rows) == ([], w, 3)


def test_two_prefills_per_iteration():
    s = StaticBatching(StaticConfig(max_batch=4, prefills_per_iteration=2))
    w = [req(i, 0.0) for i in range(5)]
    assert [r for r, _ in s.plan(view(w, now_s=0.0)).prefill] == w[:2]
    assert [r for r, _ in s.plan(view(w[2:], running=w[:2])).prefill] == w[2:4]
    assert s.plan(view(w[4:], running=w[:4])).decode == w[:4]


def test_one_prefill_per_iteration_end_to_end_by_hand(make_scenario):
    # 15 ms + 1 ms per row padded to the batch of 2 (17 ms), prefills padded too; two
    # requests of 4 prompt and 3 output tokens form one batch when the second arrives:
    # prefill r0 (+17), prefill r1 (+34), two decodes of both (+51, +68)
    changes = {
        "workload.num_requests": 2,
        "workload.arrival": {"name": "constant", "rate_per_s": 100.0},
        "workload.input_tokens": {"name": "fixed", "tokens": 4},
        "workload.output_tokens": {"name": "fixed", "tokens": 3},
        "scheduler": {"name": "static", "max_batch": 2, "prefills_per_iteration": 1},
        "cost": {
            "name": "linear", "base_ms": 15, "per_seq_ms": 1, "padding": "max_batch",
            "pad_prefill": True,
        },
    }  # fmt: skip
    rec = simulate(make_scenario(changes)).records
    start = rec["arrival_s"][1]
    assert rec["first_token_s"] - start == pytest.approx([0.017, 0.034], abs=1e-12)
    assert rec["finish_s"] - start == pytest.approx([0.068, 0.068], abs=1e-12)
    # the whole batch in one iteration (the default): first tokens together at +17
    changes["scheduler"] = {"name": "static", "max_batch": 2}
    rec = simulate(make_scenario(changes)).records
    assert rec["first_token_s"] - start == pytest.approx([0.017, 0.017], abs=1e-12)
    assert rec["finish_s"] - start == pytest.approx([0.051, 0.051], abs=1e-12)


def test_prefills_per_iteration_must_be_positive(make_scenario):
    from lyra_simpy.errors import ScenarioError

    with pytest.raises(ScenarioError) as info:
        make_scenario({"scheduler": {"name": "static", "prefills_per_iteration": 0}})
    assert str(info.value).startswith("scheduler.static.prefills_per_iteration: got 0")
