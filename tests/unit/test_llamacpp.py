"""llama.cpp's server (issue 12): slots, ubatch passes, checkpoint stops, the preset,
the per-pass cost and its fit — with numbers worked out by hand from the source rules
(policies/llamacpp.py, policies/ubatch.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from builders import llamacpp_fixed, llamacpp_raw, waiting_req
from lyra_simpy import ScenarioError, scenario_from_dict, simulate
from lyra_simpy.calibration.fit import fit_profile, predict_ms
from lyra_simpy.calibration.profiles import read_profile
from lyra_simpy.cost.base import BatchShape
from lyra_simpy.cost.profiled import ProfileCost, ProfileCostConfig
from lyra_simpy.engine.request import Request
from lyra_simpy.live.llamacpp_probes import llamacpp_config, prompt_counts
from lyra_simpy.live.profile_grid import ProfileGrid
from lyra_simpy.policies import EngineView, LlamaCppConfig, LlamaCppServer
from lyra_simpy.policies.llamacpp import prompt_chunk
from lyra_simpy.policies.ubatch import pass_counts, split_equal, split_simple, ubatches

DATA = Path(__file__).resolve().parents[1] / "data"


def view(waiting=(), running=(), free=10**6, now_s=1.0) -> EngineView:
    return EngineView(now_s, list(waiting), list(running), free, 1, True)


# -- slots ------------------------------------------------------------------------------


def test_an_idle_server_fills_slots_from_the_highest_id():
    # get_available_slot: LRU by t_last_used (-1 for all), ties to the last slot scanned
    s = LlamaCppServer(LlamaCppConfig(n_parallel=4))
    w = [waiting_req(i, 10) for i in range(5)]
    plan = s.plan(view(waiting=w))
    assert s.slots == [w[3], w[2], w[1], w[0]]  # slot 3 took the first request
    assert [r.index for r, _ in plan.prefill] == [3, 2, 1, 0]  # batch in slot order
    assert plan.prefill == [(w[3], 10), (w[2], 10), (w[1], 10), (w[0], 10)]


def _two_finish(at_s: tuple[float, float]):
    """A server of 4 slots given 4 requests (slots 3, 2, 1, 0), whose slot 3's and slot
    1's requests end at *at_s*, planned again with two requests waiting: the server, the
    first four, the two new ones and the plan."""
    s = LlamaCppServer(LlamaCppConfig(n_parallel=4))
    w = [waiting_req(i, 10) for i in range(4)]
    s.plan(view(waiting=w))
    for r in w:
        r.running = True
    for r, t in zip((w[0], w[2]), at_s, strict=True):
        r.running = False
        r.last_token_s = t
    new = [waiting_req(10, 10), waiting_req(11, 10)]
    plan = s.plan(view(waiting=new, running=[w[1], w[3]], now_s=max(at_s) + 1.0))
    return s, w, new, plan


def test_a_released_slot_is_reused_least_recently_released_first():
    s, w, new, _ = _two_finish((5.0, 6.0))
    assert s.last_used_s == [-1.0, 6.0, -1.0, 5.0]
    assert s.slots == [w[3], new[1], w[1], new[0]]  # slot 3 (5 s) before slot 1 (6 s)


def test_slots_released_in_one_step_are_reused_lowest_id_first():
    # update_slots releases the slots that finish in one step in id order, each at its own
    # ggml_time_us: the lowest id was released longest ago (item 67; the mirror before)
    s, w, new, plan = _two_finish((5.0, 5.0))
    assert s.last_used_s == [-1.0, 5.0, -1.0, 5.0]
    assert s.slots == [w[3], new[0], w[1], new[1]]  # slot 1 before slot 3
    # the step's prompts in slot order: the one sent first before the other
    assert [r.index for r, _ in plan.prefill if r.index >= 10] == [10, 11]


def test_requests_wait_for_a_slot():
    s = LlamaCppServer(LlamaCppConfig(n_parallel=2))
    w = [waiting_req(i, 10) for i in range(3)]
    plan = s.plan(view(waiting=w))
    assert [r for r, _ in plan.prefill] == [w[1], w[0]]


def test_with_kvu_a_request_waits_for_the_buffer_s_cells_not_only_the_pool():
    # -kvu's buffer of 256 cells (n_ctx 0 -> n_ctx_train 96, padded) holds two contexts of
    # 87 tokens and not a third, however large the scenario's kv_cache (found by the
    # until_s invariant: a third placed in the cells had no room)
    s = LlamaCppServer(LlamaCppConfig(n_parallel=3, n_ctx=0, n_ctx_train=96, kv_unified=True))
    assert s.config.ctx_total == 256
    w = [waiting_req(i, 39, 48) for i in range(3)]
    plan = s.plan(view(waiting=w))
    assert [r for r, _ in plan.prefill] == [w[1], w[0]]
    # per-slot KV: each slot its own stream, all three start
    s = LlamaCppServer(LlamaCppConfig(n_parallel=3, n_ctx=300, kv_unified=False))
    assert len(s.plan(view(waiting=[waiting_req(i, 39, 48) for i in range(3)])).prefill) == 3


def test_with_kvu_an_idle_slot_s_cells_are_purged_when_a_request_needs_them():
    # without --cache-idle-slots an idle slot keeps its cells; when a request needs them
    # llama.cpp purges idle slots one by one (try_clear_idle_slots); the slot a request
    # takes frees its own first
    s = LlamaCppServer(LlamaCppConfig(n_parallel=3, n_ctx=256, kv_unified=True, cache_ram_mib=0))
    assert not s.config.clears_idle_slots
    s.idle_cells = [100, 100, 0]
    s.last_used_s = [1.0, 2.0, 3.0]  # slot 0 the least recently used
    s.plan(view(waiting=[waiting_req(0, 100, 50)]))
    assert s.idle_cells == [0, 100, 0]  # its own slot's cells: 150 fit beside slot 1's
    s = LlamaCppServer(LlamaCppConfig(n_parallel=3, n_ctx=256, kv_unified=True, cache_ram_mib=0))
    s.idle_cells = [0, 100, 100]
    s.last_used_s = [1.0, 2.0, 3.0]
    s.plan(view(waiting=[waiting_req(0, 100, 50)]))
    assert s.idle_cells == [0, 0, 100]  # slot 0 taken; the first idle slot with cells purged
    # a request that would not fit even with every idle slot purged waits, purging none
    s = LlamaCppServer(LlamaCppConfig(n_parallel=3, n_ctx=256, kv_unified=True, cache_ram_mib=0))
    s.slots[2] = waiting_req(9, 100, 50)
    s._started[2] = True
    s.idle_cells = [0, 100, 0]
    s.last_used_s = [1.0, 2.0, 3.0]
    running = s.slots[2]
    running.running = True
    s.plan(view(waiting=[waiting_req(0, 100, 50)], running=[running]))
    assert s.slots[:2] == [None, None]
    assert s.idle_cells == [0, 100, 0]


def test_a_request_beyond_its_slots_context_is_refused():
    # -c 4096 -np 4: 1024 cells per slot (pad256(4096 / 4))
    s = LlamaCppServer(LlamaCppConfig(n_parallel=4, n_ctx=4096))
    assert s.refusal(Request(0, 0, 0.0, 1000, 24), 4096, 1) is None
    assert s.refusal(Request(0, 0, 0.0, 1000, 25), 4096, 1) == "never_fits_kv"
    unified = LlamaCppServer(LlamaCppConfig(n_parallel=4, n_ctx=4096, kv_unified=True))
    assert unified.refusal(Request(0, 0, 0.0, 4000, 96), 4096, 1) is None


@pytest.mark.parametrize(
    ("n_ctx", "n_parallel", "unified", "total", "slot"),
    [
        (4096, 4, False, 4096, 1024),
        (4096, 3, False, 4608, 1536),  # 4096 / 3 = 1365 -> padded to 1536 per slot
        (4000, 4, False, 4096, 1024),  # n_ctx padded to 4096 first
        (4096, 4, True, 4096, 4096),
        (0, 4, False, 32768, 8192),  # -c 0: the training context
        (65536, 1, False, 65536, 32768),  # a slot never exceeds the training context
    ],
)
def test_context_per_slot(n_ctx, n_parallel, unified, total, slot):
    c = LlamaCppConfig(n_ctx=n_ctx, n_parallel=n_parallel, kv_unified=unified)
    assert (c.ctx_total, c.slot_ctx) == (total, slot)


# -- passes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slots", "n"),
    [([0, 1, 2, 3], 1), ([0, 2, 3], 2), ([1, 2], 1), ([0, 2], 2), ([0, 3], 2), ([0], 1)],
)
def test_one_pass_per_run_of_consecutive_decoding_slots(slots, n):
    segments, outputs = [(s, 1) for s in slots], [True] * len(slots)
    assert pass_counts(segments, outputs, 2048, 512, unified=False).passes == n
    assert pass_counts(segments, outputs, 2048, 512, unified=True).passes == 1


def test_split_equal_takes_as_many_tokens_from_each_slot_of_a_run():
    # decode in slot 0, prompt of 10 in slot 1: one token each, then the prompt's 9
    assert split_equal([(0, 1), (1, 10)], 512) == [[(0, 1), (1, 1)], [(1, 9)]]
    # prompts of 100 (slot 0) and 300 (slot 1): 100 each, then slot 1's 200
    assert split_equal([(0, 100), (1, 300)], 512) == [[(0, 100), (1, 100)], [(1, 200)]]
    # three slots with 400 each: at most 512 // 3 = 170 each per ubatch
    assert split_equal([(0, 400), (1, 400), (2, 400)], 512)[0] == [(0, 170), (1, 170), (2, 170)]
    # decodes in slots 0 and 2 with a prompt in slot 1 behind them (batch order!)
    assert split_equal([(0, 1), (2, 1), (1, 5)], 512) == [
        [(0, 1), (1, 1)],
        [(2, 1)],
        [(1, 4)],
    ]


def test_ubatch_splits_of_long_prompts():
    assert split_equal([(0, 1200)], 512) == [[(0, 512)], [(0, 512)], [(0, 176)]]
    assert split_simple([(0, 1), (2, 1), (1, 600)], 512) == [
        [(0, 1), (2, 1), (1, 510)],
        [(1, 90)],
    ]
    # n_batch 256 cuts the batch into views first: 256 + 44 tokens, 128 per ubatch
    assert ubatches([(0, 300)], 256, 128, unified=True) == [
        [(0, 128)],
        [(0, 128)],
        [(0, 44)],
    ]
    assert pass_counts([(0, 300)], [True], 256, 128, unified=True).rows == (128, 128, 44)


@pytest.mark.parametrize(
    ("segments", "outputs", "unified", "n_batch", "n_ubatch", "want"),
    [
        # decodes in slots 0 and 2: two passes, each with a decode's logits
        ([(0, 1), (2, 1)], [True, True], False, 2048, 512, (2, 2, (1, 1))),
        # decodes in slots 0, 1 and 3: a pass of two, then one
        ([(0, 1), (1, 1), (3, 1)], [True] * 3, False, 2048, 512, (2, 2, (2, 1))),
        # a decode in slot 0 and the first 300 tokens of a prompt in slot 1: one token
        # each, then the prompt's 299 alone, without logits
        ([(0, 1), (1, 300)], [True, False], False, 2048, 512, (2, 1, (2, 299))),
        # the same chunk ending its prompt: its last token's pass has logits too
        ([(0, 1), (1, 300)], [True, True], False, 2048, 512, (2, 2, (2, 299))),
        # -kvu: 1 + 600 tokens in ubatches of 512; the prompt ends in the second
        ([(0, 1), (1, 600)], [True, True], True, 2048, 512, (2, 2, (512, 89))),
        ([(0, 1), (1, 600)], [True, False], True, 2048, 512, (2, 1, (512, 89))),
        # a chunk that ends no prompt, alone: passes but no logits
        ([(1, 1000)], [False], True, 2048, 512, (2, 0, (512, 488))),
        # n_batch 256 cuts views first: 300 tokens as 128, 128, 44; the end in the last
        ([(0, 300)], [True], True, 256, 128, (3, 1, (128, 128, 44))),
        # -kvu decodes in slots 0 and 2: one pass of both
        ([(0, 1), (2, 1)], [True, True], True, 2048, 512, (1, 1, (2,))),
    ],
)
def test_pass_counts_count_the_passes_that_compute_logits(
    segments, outputs, unified, n_batch, n_ubatch, want
):
    got = pass_counts(segments, outputs, n_batch, n_ubatch, unified)
    assert got == want
    # each pass's tokens are those of the ubatches the batch is cut into
    cut = ubatches(segments, n_batch, n_ubatch, unified)
    assert got.rows == tuple(sum(t for _, t in u) for u in cut)


def test_the_plan_says_which_steps_compute_logits():
    # a prompt of 300 cut for a context checkpoint: 296 tokens without logits, then 4 with
    s = LlamaCppServer(LlamaCppConfig(n_parallel=2, sliding_window=True))
    r = waiting_req(0, 300, 5)
    first = s.plan(view(waiting=[r]))
    assert first.prefill == [(r, 296)]
    assert (first.passes, first.output_passes) == (1, 0)
    r.running, r.computed_tokens = True, 296
    last = s.plan(view(running=[r]))
    assert last.prefill == [(r, 4)]
    assert (last.passes, last.output_passes) == (1, 1)


def test_the_plan_counts_passes_of_fragmented_slots():
    s = LlamaCppServer(LlamaCppConfig(n_parallel=4))
    w = [waiting_req(i, 10, 50) for i in range(3)]
    s.plan(view(waiting=w))  # slots 3, 2, 1
    for r in w:
        r.running, r.computed_tokens, r.generated_tokens = True, 10, 1
    w[1].running = False  # slot 2 finished
    w[1].last_token_s = 0.5
    plan = s.plan(view(running=[w[0], w[2]]))
    assert plan.decode == [w[2], w[0]]  # slots 1 and 3
    assert plan.passes == 2
    assert plan.output_passes == 2  # each pass computes its decode's logits


# -- checkpoint stops -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "n_batch", "chunks"),
    [
        (300, 2048, [296, 4]),
        (1000, 2048, [484, 512, 4]),  # stops 516 and 4 tokens before the end
        (4, 2048, [4]),
        (5, 2048, [1, 4]),
        (300, 256, [44, 252, 4]),  # stops min(256, 516) = 256 and 4
        (3000, 2048, [2048, 436, 512, 4]),
    ],
)
def test_prompt_chunks_stop_before_the_end_for_checkpoints(prompt, n_batch, chunks):
    c = LlamaCppConfig(n_batch=n_batch, sliding_window=True)
    got, left = [], prompt
    while left:
        take = prompt_chunk(left, c.batch_tokens, c.checkpoint_stops)
        got.append(take)
        left -= take
    assert got == chunks


def test_no_stops_without_sliding_window_or_checkpoints():
    assert LlamaCppConfig().checkpoint_stops == ()
    assert LlamaCppConfig(sliding_window=True, ctx_checkpoints=0).checkpoint_stops == ()
    assert prompt_chunk(300, 2048, ()) == 300


def prompt_steps(c: LlamaCppConfig, prompt: int, decoders: int) -> tuple[int, ...]:
    return prompt_counts(c, 1, prompt, decoders, 16)[:4]


def test_prompt_steps_of_probes():
    c = LlamaCppConfig(n_parallel=4, n_ctx=4096, sliding_window=True)
    # (steps, passes, checkpoints, passes computing logits: only the prompt's last step)
    assert prompt_steps(c, 300, 0) == (2, 2, 1, 1)  # 296 then 4 with a checkpoint
    assert prompt_steps(c, 4, 0) == (1, 1, 0, 1)
    assert prompt_steps(c, 1000, 0) == (3, 3, 2, 1)  # 484, 512 (+ckpt), 4 (+ckpt)
    # beside 3 decoders in slots 0-2, the prompt in slot 3 shares their first pass, which
    # computes their logits in both steps; the prompt's own last 3 tokens a pass of their
    # own with its logits (60 = 1 + 59, then 4 = 1 + 3)
    assert prompt_steps(c, 64, 3) == (2, 4, 1, 3)


def _run(sliding: bool, ckpt_ms: float = 0.0) -> float:
    cost = {"name": "linear", "base_ms": 10.0, "per_prefill_token_ms": 0.1}
    raw = llamacpp_fixed(1, 1.0, (300, 3), cost, sliding_window=sliding)
    return float(simulate(scenario_from_dict(raw)).records["ttft_ms"][0])


def test_the_checkpoint_step_adds_a_step_to_ttft():
    # one step of 10 + 300 x 0.1 = 40 ms; split: (10 + 29.6) + (10 + 0.4) = 50 ms
    assert _run(False) == pytest.approx(40.0)
    assert _run(True) == pytest.approx(50.0)


# -- cost -------------------------------------------------------------------------------


def _fit_with(tmp_path: Path, **coef: float) -> Path:
    fit = yaml.safe_load((DATA / "synthetic_fit.yaml").read_text())
    fit["coefficients"].update(coef)
    fit["profile"] = None
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(fit))
    return path


def test_profile_cost_charges_passes_that_compute_logits(tmp_path):
    path = _fit_with(tmp_path, per_extra_pass_ms=2.0, per_output_pass_ms=4.0)
    cost = ProfileCost(ProfileCostConfig.model_validate({"name": "profile", "path": str(path)}), 4)
    # decode of 3 rows at 100 context: 5 + 4 (its logits) + 0.5 x 3 + 0.002 x 300 = 11.1 ms,
    # fused or not
    one = BatchShape(0, 0, 0, 3, 3, 300)
    assert cost.iteration_s(one) == pytest.approx(11.1e-3)
    assert cost.decode_span_s(3, 300, 3, 2) == pytest.approx([11.1e-3, 11.106e-3])
    # in three passes (fragmented slots), each with logits: + 2 x (2 + 4) ms
    three = BatchShape(0, 0, 0, 3, 3, 300, 0, 3, 0, -1, 3)
    assert cost.iteration_s(three) == pytest.approx(23.1e-3)
    # a prompt's first 296 tokens (no logits): 5 + 0.05 x 296 + 1e-4 x 296²; its last 4
    # (logits) + 4
    pair = 1e-4 * 296 * 296
    first = BatchShape(1, 296, 296 * 296, 0, 0, 0, 0, 1, 0, -1, 0)
    assert cost.iteration_s(first) == pytest.approx((5 + 0.05 * 296 + pair) / 1000)
    last = BatchShape(1, 4, 4 * 300, 0, 0, 0)
    assert cost.iteration_s(last) == pytest.approx((5 + 4 + 0.2 + 0.12) / 1000)


def test_profile_cost_charges_extra_passes_and_checkpoints(tmp_path):
    path = _fit_with(tmp_path, per_extra_pass_ms=2.0, per_checkpoint_ms=3.0)
    cfg = ProfileCostConfig.model_validate({"name": "profile", "path": str(path)})
    cost = ProfileCost(cfg, 4)
    # decode of 3 rows at 100 context each: 5 + 0.5 x 3 + 0.002 x 300 = 7.1 ms
    one = BatchShape(0, 0, 0, 3, 3, 300)
    assert cost.iteration_s(one) == pytest.approx(7.1e-3)
    three = BatchShape(0, 0, 0, 3, 3, 300, 0, 3, 0)
    assert cost.iteration_s(three) == pytest.approx(11.1e-3)  # + 2 x 2 ms
    # a 4-token final chunk with a checkpoint: 5 + 0.05 x 4 + 1e-4 x 4 x 300 + 3
    last = BatchShape(1, 4, 4 * 300, 0, 0, 0, 0, 1, 1)
    assert cost.iteration_s(last) == pytest.approx((5 + 0.2 + 0.12 + 3) / 1000)


def test_calibrate_fits_pass_and_checkpoint_terms_from_the_extra_columns(tmp_path):
    f, seq, pre, per_pass, ckpt = 5.0, 0.5, 0.05, 2.0, 3.0
    rows = ["phase,batch_size,input_tokens,context_len,latency_ms,steps,passes,checkpoints"]
    for p, steps, ck in [(4, 1, 0), (8, 2, 1), (64, 2, 1), (300, 2, 1)]:
        rows.append(f"prefill,1,{p},0,{steps * f + pre * p + ck * ckpt},{steps},{steps},{ck}")
    for b, n in [(1, 1), (2, 1), (4, 1), (2, 2), (3, 2)]:
        rows.append(f"decode,{b},0,0,{f + seq * b + per_pass * (n - 1)},1,{n},0")
    path = tmp_path / "p.csv"
    path.write_text("\n".join(rows) + "\n")
    fit = fit_profile(read_profile(path))
    c = fit.coefficients
    assert c.fixed_ms == pytest.approx(f)
    assert c.per_decode_seq_ms == pytest.approx(seq)
    assert c.per_prefill_token_ms == pytest.approx(pre)
    assert c.per_extra_pass_ms == pytest.approx(per_pass)
    assert c.per_checkpoint_ms == pytest.approx(ckpt)
    np.testing.assert_allclose(predict_ms(fit, read_profile(path)), read_profile(path).latency_ms)
    robust = fit_profile(read_profile(path), loss="soft_l1").coefficients
    assert robust.per_extra_pass_ms == pytest.approx(per_pass, rel=1e-3)


def test_calibrate_fits_the_logits_term_from_the_output_passes_column(tmp_path):
    # llama.cpp's probes as lyra-simpy profile writes them (-kvu, checkpoints on): a
    # prompt's first step computes no logits, its last step and every decode pass do. A
    # lone prompt's two steps always copy a checkpoint too: the mixed rows, whose decodes
    # compute logits in both steps, tell a step's logits from its fixed cost
    f, seq, pre, per_pass, ckpt, logits = 3.0, 0.5, 0.05, 1.0, 0.5, 12.0
    head = "phase,batch_size,input_tokens,context_len,latency_ms,steps,passes,checkpoints"
    rows = [head + ",output_passes"]
    for p, steps, ck in [(4, 1, 0), (8, 2, 1), (64, 2, 1), (300, 2, 1)]:
        ms = steps * f + pre * p + ck * ckpt + logits
        rows.append(f"prefill,1,{p},0,{ms},{steps},{steps},{ck},1")
    for b, n in [(1, 1), (2, 1), (4, 1), (2, 2), (3, 2)]:
        ms = f + seq * b + (per_pass + logits) * (n - 1) + logits
        rows.append(f"decode,{b},0,0,{ms},1,{n},0,{n}")
    for b, p in [(1, 64), (3, 256)]:
        ms = 2 * (f + seq * b + logits) + pre * p + ckpt
        rows.append(f"mixed,{b},{p},0,{ms},2,2,1,2")
    path = tmp_path / "p.csv"
    path.write_text("\n".join(rows) + "\n")
    c = fit_profile(read_profile(path)).coefficients
    assert c.fixed_ms == pytest.approx(f)
    assert c.per_output_pass_ms == pytest.approx(logits)
    assert c.per_extra_pass_ms == pytest.approx(per_pass)
    assert c.per_checkpoint_ms == pytest.approx(ckpt)
    # a profile written before the column: derived (a prefill row's last step, each
    # decode pass, one a step of a mixed row: exact here)
    old = tmp_path / "old.csv"
    old.write_text("\n".join(r.rsplit(",", 1)[0] for r in rows[:1]) + "\n" + "\n".join(
        r.rsplit(",", 1)[0] for r in rows[1:]) + "\n")  # fmt: skip
    derived = fit_profile(read_profile(old))
    assert derived.coefficients.per_output_pass_ms == pytest.approx(logits)  # (derived)


def test_profiles_without_the_columns_fit_as_before():
    fit = fit_profile(read_profile(DATA / "synthetic_profile.csv"))
    assert fit.coefficients.per_extra_pass_ms == 0.0
    assert "per_extra_pass_ms" not in fit.fit.unmeasured_terms


# -- preset -----------------------------------------------------------------------------


def _sched(raw: dict[str, Any]) -> tuple[LlamaCppConfig, Any]:
    s = scenario_from_dict(copy.deepcopy(raw))
    assert isinstance(s.scheduler, LlamaCppConfig)
    return s.scheduler, s.kv_cache


def test_preset_defaults_are_llama_cpps():
    c, kv = _sched(llamacpp_raw("llama-server -m model.gguf"))
    # -np auto: 4 slots, unified KV; -c 0: the training context (32768 cells)
    assert (c.n_parallel, c.kv_unified, c.n_ctx) == (4, True, 0)
    assert (c.n_batch, c.n_ubatch, c.ctx_checkpoints, c.cont_batching) == (2048, 512, 32, True)
    assert c.cache_prompt is True
    assert (kv.block_size, kv.num_blocks) == (1, 32768)


def test_preset_np_given_means_per_slot_kv():
    c, kv = _sched(llamacpp_raw("llama-server -m m.gguf -np 4 -c 4096 -t 2 --host 127.0.0.1"))
    assert (c.n_parallel, c.kv_unified, c.n_ctx, c.slot_ctx) == (4, False, 4096, 1024)
    assert kv.num_blocks == 4096


def test_preset_explicit_flags():
    line = (
        "llama-server -np 3 -c 4096 -kvu -b 512 -ub 128 --ctx-checkpoints 0 -nocb "
        "--no-cache-prompt --cache-ram 0 -fa on"
    )
    c, kv = _sched(llamacpp_raw(line))
    assert (c.n_parallel, c.kv_unified, c.n_batch, c.n_ubatch) == (3, True, 512, 128)
    assert (c.ctx_checkpoints, c.cont_batching, c.cache_prompt) == (0, False, False)
    assert kv.num_blocks == 4096
    c2, kv2 = _sched(llamacpp_raw("llama-server -np 3 -c 4096 --no-kv-unified"))
    assert (c2.kv_unified, kv2.num_blocks) == (False, 4608)


def test_preset_swa_full_turns_checkpoints_off_and_flags_edit_the_command():
    raw = llamacpp_raw("llama-server -np 2", swa_full=None)
    raw["scheduler"] = {"name": "llamacpp"}
    c, _ = _sched(raw)
    assert c.sliding_window is False
    c2, _ = _sched(llamacpp_raw("llama-server -np 2 -b 512", batch_size=1024))
    assert c2.n_batch == 1024
    raw = llamacpp_raw("llama-server -np 2")
    raw["scheduler"] = {"name": "llamacpp", "sliding_window": True, "n_ctx_train": 8192}
    c3, kv3 = _sched(raw)
    assert (c3.sliding_window, kv3.num_blocks) == (True, 8192)  # -c 0: 8192 cells


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (llamacpp_raw("llama-server --bogus 3"), "engine.flags.bogus: unknown llamacpp flag"),
        (llamacpp_raw("llama-server -np 0"), "engine.flags.n_parallel"),
        (llamacpp_raw(None, ubatch_size=0), "engine.flags.ubatch_size"),
    ],
)
def test_preset_errors_are_one_line(raw, words):
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(copy.deepcopy(raw))
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_preset_conflict_with_the_scenario_is_an_error():
    raw = llamacpp_raw("llama-server -np 4")
    raw["scheduler"] = {"name": "llamacpp", "n_parallel": 8}
    with pytest.raises(ScenarioError, match=r"scheduler.n_parallel: got 8, but engine.flags"):
        scenario_from_dict(raw)


def test_shared_prefixes_with_cache_prompt_are_refused():
    raw = llamacpp_raw("llama-server -np 2")
    raw["workload"]["prefix"] = {"name": "system_prompt", "groups": 2, "prefix_tokens": 8}
    with pytest.raises(ScenarioError, match="cache_prompt: got true with shared prefixes"):
        scenario_from_dict(copy.deepcopy(raw))
    raw["engine"]["command"] += " --no-cache-prompt"
    scenario_from_dict(raw)


def test_profile_reads_the_server_flags():
    grid = ProfileGrid(sliding_window=True)
    c = llamacpp_config("-np 4 -c 4096 -t 2", grid)
    assert c is not None
    assert (c.n_parallel, c.kv_unified, c.sliding_window) == (4, False, True)
    assert llamacpp_config("", grid) is None
    off = llamacpp_config("-np 4 --swa-full", grid)
    assert off is not None
    assert off.checkpoint_stops == ()


def test_a_disaggregated_cluster_of_llamacpp_replicas_is_refused(make_scenario):
    """llama-server has no prefill/decode hand-off: the combination is a one-line error,
    not a model of something that does not exist (the thorough property run found
    requests lost and KV overrun when it was allowed)."""
    from lyra_simpy.errors import ScenarioError

    disagg = {
        "disaggregation": {
            "prefill": {"count": 1},
            "decode": {"count": 1},
            "link": {"bandwidth_gb_s": 1.0, "kv_bytes_per_token": 1000},
        }
    }
    with pytest.raises(ScenarioError, match="got 'llamacpp' in a disaggregated cluster"):
        make_scenario(
            {
                "scheduler": {"name": "llamacpp", "n_parallel": 2, "n_ctx_train": 4096},
                "kv_cache": {"block_size": 1, "num_blocks": 4096},
                "cluster": disagg,
            }
        )
