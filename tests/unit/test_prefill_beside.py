"""``continuous.prefill_beside_decode``: prompts run beside the decodes (Lab 02's reading,
docs/guide/lab02.md), worked by hand on the linear cost model."""

from __future__ import annotations

import numpy as np
import pytest

from builders import trace_workload
from lyra_simpy.errors import ScenarioError
from lyra_simpy.simulation import simulate

# Two requests at 0, a third at 40 ms; 4 prompt tokens each.
ROWS = [(0.0, 4, 6), (0.0, 4, 6), (0.040, 4, 3)]


def _changes(tmp_path, beside: bool, per_prefill_token_ms: float = 0.0) -> dict:
    return {
        **trace_workload(tmp_path, ROWS),
        "scheduler": {"name": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 64,
                      "prefill_beside_decode": beside},
        "cost": {"name": "linear", "base_ms": 15, "per_seq_ms": 1,
                 "per_prefill_token_ms": per_prefill_token_ms},
    }  # fmt: skip


def test_a_prompt_beside_the_decodes_delays_only_itself(make_scenario, tmp_path):
    # 15 ms + 1 ms a sequence: both prompts at 0 (no decodes yet: a prefill-only
    # iteration, 17 ms), decodes of two at 17 ms each (34, 51); the third request, come
    # at 40, is admitted at 51 beside the decodes: its prompt alone costs 16 ms, the two
    # decodes 17, so the iteration lasts 17 and its first token comes at 51 + 16 = 67;
    # then three decode (18 ms: 86, 104)
    rec = simulate(make_scenario(_changes(tmp_path, True), base_dir=tmp_path)).records
    assert rec["first_token_s"] == pytest.approx([0.017, 0.017, 0.067], abs=1e-12)
    assert rec["finish_s"] == pytest.approx([0.104, 0.104, 0.104], abs=1e-12)
    # the running requests' tokens every 17 ms until the third decodes beside them
    tpot = (rec["finish_s"] - rec["first_token_s"]) / (rec["output_tokens"] - 1)
    assert tpot[:2] == pytest.approx([0.0174, 0.0174], abs=1e-12)
    assert tpot[2] == pytest.approx(0.0185, abs=1e-12)
    # mixed into the iteration (vLLM's way), the third's prompt lengthens it for all
    mixed = simulate(make_scenario(_changes(tmp_path, False), base_dir=tmp_path)).records
    assert mixed["first_token_s"][2] == pytest.approx(0.069, abs=1e-12)
    assert np.all(mixed["finish_s"][:2] > rec["finish_s"][:2])


def test_a_prompt_longer_than_the_decodes_sets_the_iteration(make_scenario, tmp_path):
    # 5 ms a prompt token: the first two prompts together cost 15 + 2 + 40 = 57 ms; the
    # third (come at 40) is admitted at 57 beside the two's decodes, its part 15 + 1 + 20
    # = 36 ms against their 17, so the iteration lasts 36 (the decodes wait for it): its
    # first token and the two's second at 93; then three decode at 18 ms (111, 129: the
    # third ends) and two at 17 (146, 163)
    changes = _changes(tmp_path, True, per_prefill_token_ms=5.0)
    rec = simulate(make_scenario(changes, base_dir=tmp_path)).records
    assert rec["first_token_s"] == pytest.approx([0.057, 0.057, 0.093], abs=1e-12)
    assert rec["finish_s"] == pytest.approx([0.163, 0.163, 0.129], abs=1e-12)


def test_beside_and_prefill_only_iterations_exclude_each_other(make_scenario):
    with pytest.raises(ScenarioError) as info:
        make_scenario({"scheduler": {"name": "continuous", "prefill_beside_decode": True,
                                     "prefills_per_iteration": 1}})  # fmt: skip
    message = str(info.value)
    assert "prefill_beside_decode" in message
    assert "prefills_per_iteration: 1" in message


def test_prompts_beside_the_decodes_take_no_draft(make_scenario):
    with pytest.raises(ScenarioError) as info:
        make_scenario({"scheduler": {"name": "continuous", "prefill_beside_decode": True},
                       "speculative": {"num_steps": 2, "mean_accepted_tokens": 1.0}})  # fmt: skip
    assert "speculative: got a draft with scheduler.prefill_beside_decode: true" in str(info.value)
