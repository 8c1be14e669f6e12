"""What a llama.cpp prompt token attends over (issue 12): ``n_kv``, the used cells of
its pass's KV stream padded to 256 (``get_n_kv``), with ``-kvu`` every slot's cells;
the probe column that measures it, the fit's units and the cost — numbers worked out by
hand from the rules in policies/llamacpp.py."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from builders import llamacpp_raw, waiting_req
from lyra_simpy import ScenarioError, scenario_from_dict
from lyra_simpy.calibration.fit import fit_profile, predict_ms
from lyra_simpy.calibration.profiles import read_profile
from lyra_simpy.cost.base import BatchShape
from lyra_simpy.cost.profiled import ProfileCost, ProfileCostConfig
from lyra_simpy.live.llamacpp_probes import prompt_counts
from lyra_simpy.policies import EngineView, LlamaCppConfig, LlamaCppServer
from lyra_simpy.policies.llamacpp_attention import n_kv, step_attention

DATA = Path(__file__).resolve().parents[1] / "data"
PER_SLOT = LlamaCppConfig(n_parallel=4, n_ctx=4096)  # 1024 cells a slot
UNIFIED = LlamaCppConfig(n_parallel=4, n_ctx=4096, kv_unified=True)


def view(waiting=(), running=(), now_s=1.0) -> EngineView:
    return EngineView(now_s, list(waiting), list(running), 10**6, 1, True)


@pytest.mark.parametrize(
    ("cells", "stream", "expected"),
    [(1, 4096, 256), (256, 4096, 256), (257, 4096, 512), (1000, 1024, 1024), (3000, 1024, 1024)],
)
def test_n_kv_is_the_used_cells_padded_to_256_within_the_stream(cells, stream, expected):
    assert n_kv(cells, stream) == expected


def test_with_per_slot_kv_a_prompt_attends_over_its_own_stream():
    # 300 new tokens after 100 held: one ubatch, 400 cells -> 512 each
    assert step_attention(PER_SLOT, 3, [(100, 300)], held=5000).spanned == 300 * 512
    # 700 tokens from nothing: ubatches of 512 (-> 512 cells) and 188 (700 -> 768)
    assert step_attention(PER_SLOT, 0, [(0, 700)], held=0).spanned == 512 * 512 + 188 * 768


def test_with_kvu_a_prompt_attends_over_every_slots_cells():
    # 3 decoders hold 3 x 300 cells; a 200-token prompt after their 3 tokens: the batch
    # is one ubatch of 203 tokens, the buffer then holds 900 + 203 cells -> 1280
    assert step_attention(UNIFIED, 3, [(0, 200)], held=900).spanned == 200 * 1280
    # the same prompt alone: 200 cells -> 256
    assert step_attention(UNIFIED, 0, [(0, 200)], held=0).spanned == 200 * 256


def test_kvu_ubatches_cut_the_batch_whatever_the_sequences():
    # 2 decode tokens, prompts of 600 and 100: ubatch 1 = 2 + 510 of the first prompt
    # (cells 100 + 512 -> 768), ubatch 2 = its last 90 + the 100 (cells 100 + 702 -> 1024)
    got = step_attention(UNIFIED, 2, [(0, 600), (0, 100)], held=100).spanned
    assert got == 510 * 768 + 90 * 1024 + 100 * 1024


def _started(server: LlamaCppServer, reqs, tokens: int, generated: int = 1) -> None:
    server.plan(view(waiting=reqs))
    for r in reqs:
        r.running, r.computed_tokens, r.generated_tokens = True, tokens, generated


def test_the_plan_gives_the_cells_a_kvu_prompt_attends_over():
    s = LlamaCppServer(UNIFIED)
    old = [waiting_req(i, 300, 50) for i in range(3)]
    _started(s, old, 300)
    new = waiting_req(9, 200, 10)
    plan = s.plan(view(waiting=[new], running=old))
    assert plan.prefill == [(new, 200)]
    assert plan.prefill_attention_cells == 200 * 1280  # as the worked example above
    per_slot = LlamaCppServer(PER_SLOT)
    old = [waiting_req(i, 300, 50) for i in range(3)]
    _started(per_slot, old, 300)
    new = waiting_req(9, 200, 10)
    assert per_slot.plan(view(waiting=[new], running=old)).prefill_attention_cells == 200 * 256


def test_a_plan_without_a_prompt_leaves_the_cells_unset():
    s = LlamaCppServer(UNIFIED)
    old = [waiting_req(i, 30, 50) for i in range(2)]
    _started(s, old, 30)
    plan = s.plan(view(running=old))
    assert plan.decode
    assert plan.prefill_attention_cells == -1


@pytest.mark.parametrize(("cache_ram", "idle_cells"), [(8192, 0), (0, 700)])
def test_idle_slots_keep_their_cells_only_without_the_prompt_cache(cache_ram, idle_cells):
    """With the default prompt cache an idle slot is cleared when a request launches;
    with --cache-ram 0 it keeps its last request's cells (700 here)."""
    cfg = UNIFIED.model_copy(update={"cache_ram_mib": cache_ram})
    s = LlamaCppServer(cfg)
    done, running = waiting_req(0, 600, 100), waiting_req(1, 300, 50)
    _started(s, [done, running], 300)
    done.computed_tokens, done.running, done.last_token_s = 700, False, 0.9
    new = waiting_req(2, 200, 10)
    plan = s.plan(view(waiting=[new], running=[running]))
    assert plan.prefill == [(new, 200)]
    held = 300 + idle_cells  # the running request's cells, and the idle slot's
    assert plan.prefill_attention_cells == 200 * n_kv(held + 1 + 200, 4096)
    assert cfg.clears_idle_slots is (cache_ram != 0)


def test_per_slot_kv_never_clears_or_counts_other_slots():
    assert not PER_SLOT.clears_idle_slots
    assert PER_SLOT.stream_cells == 1024
    assert UNIFIED.stream_cells == 4096


def prompt_attention(c: LlamaCppConfig, prompt: int, decoders: int, context: int) -> int:
    return prompt_counts(c, 1, prompt, decoders, context)[4]


def test_the_probe_column_follows_the_probe_layout():
    # lone 300-token prompt on a sliding-window model: 296 then 4 (checkpoint stop)
    swa = UNIFIED.model_copy(update={"sliding_window": True})
    assert prompt_attention(swa, 300, 0, 0) == 296 * 512 + 4 * 512
    # beside 3 decoders at 201 tokens: step 1 holds 603 + 3 + 296 -> 1024 cells, step 2
    # 606 + 296 + 3 + 4 -> 1024
    assert prompt_attention(swa, 300, 3, 201) == 296 * 1024 + 4 * 1024
    per_slot = PER_SLOT.model_copy(update={"sliding_window": True})
    assert prompt_attention(per_slot, 300, 3, 201) == 296 * 512 + 4 * 512


# -- the preset -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "ram", "idle"),
    [
        ("", 8192, True),
        ("--cache-ram 0", 0, True),
        ("-cram -1", -1, True),
        ("--no-cache-idle-slots", 8192, False),
    ],
)
def test_preset_reads_the_prompt_cache_flags(words, ram, idle):
    s = scenario_from_dict(copy.deepcopy(llamacpp_raw(f"llama-server -m m.gguf {words}")))
    assert (s.scheduler.cache_ram_mib, s.scheduler.cache_idle_slots) == (ram, idle)
    assert s.scheduler.clears_idle_slots is (ram != 0 and idle)  # -np auto: -kvu


def test_preset_refuses_a_negative_cache_size_in_one_line():
    with pytest.raises(ScenarioError, match=r"cache_ram.*-5.*>= 0 \(MiB\), or -1") as err:
        scenario_from_dict(llamacpp_raw("llama-server -m m.gguf --cache-ram -5"))
    assert "\n" not in str(err.value)


# -- the fit's units and the cost -------------------------------------------------------


def _profile(tmp_path: Path, cells: bool) -> Path:
    """Rows made from known coefficients: 5 ms a step, 0.5 a decode, 0.05 a prompt
    token, 1e-4 per prompt token x cell attended (kvu-like: mixed rows attend wider)."""
    head = "phase,batch_size,input_tokens,context_len,latency_ms,steps,passes,checkpoints"
    rows = [head + (",attention_cells" if cells else "")]
    for ph, b, i, c, att in [
        ("prefill", 1, 100, 0, 100 * 256),
        ("prefill", 1, 300, 0, 300 * 512),
        ("prefill", 1, 600, 0, 600 * 768),
        ("mixed", 3, 100, 200, 100 * 768),
        ("mixed", 3, 300, 200, 300 * 1024),
        ("mixed", 1, 300, 200, 300 * 512),
    ]:
        lat = 5 + 0.5 * (b if ph == "mixed" else 0) + 0.05 * i + 1e-4 * att
        rows.append(f"{ph},{b},{i},{c},{lat},1,1,0" + (f",{att}" if cells else ""))
    for b in (1, 2, 4):
        rows.append(f"decode,{b},0,200,{5 + 0.5 * b},1,1,0" + (",0" if cells else ""))
    path = tmp_path / ("cells.csv" if cells else "own.csv")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_profile_with_the_column_fits_attention_per_cell(tmp_path):
    profile = read_profile(_profile(tmp_path, cells=True))
    fit = fit_profile(profile)
    assert fit.attention == "n_kv"
    c = fit.coefficients
    assert (c.fixed_ms, c.per_decode_seq_ms) == (pytest.approx(5), pytest.approx(0.5))
    assert c.per_prefill_token_ms == pytest.approx(0.05)
    assert c.per_prefill_attention_ms == pytest.approx(1e-4)
    np.testing.assert_allclose(predict_ms(fit, profile), profile.latency_ms)


def test_a_profile_without_it_fits_as_before(tmp_path):
    fit = fit_profile(read_profile(_profile(tmp_path, cells=False)))
    assert fit.attention == "own"


def test_the_cost_charges_cells_only_when_the_fit_was_made_on_them(tmp_path):
    shape = BatchShape(1, 300, 300 * 300, 3, 3, 600, 0, 1, 0, 300 * 1024)
    base = yaml.safe_load((DATA / "synthetic_fit.yaml").read_text())
    base["profile"] = None
    base["coefficients"] = {"fixed_ms": 5.0, "per_prefill_attention_ms": 1e-4}
    costs = {}
    for units in ("own", "n_kv"):
        path = tmp_path / f"{units}.yaml"
        path.write_text(yaml.safe_dump({**base, "attention": units}))
        cfg = ProfileCostConfig.model_validate({"name": "profile", "path": str(path)})
        costs[units] = ProfileCost(cfg, 4).iteration_s(shape)
    assert costs["own"] == pytest.approx((5 + 1e-4 * 300 * 300) / 1000)
    assert costs["n_kv"] == pytest.approx((5 + 1e-4 * 300 * 1024) / 1000)
    unknown = shape._replace(prefill_attention_cells=-1)  # another engine: its own units
    cfg = ProfileCostConfig.model_validate({"name": "profile", "path": str(tmp_path / "n_kv.yaml")})
    assert ProfileCost(cfg, 4).iteration_s(unknown) == pytest.approx(costs["own"])
