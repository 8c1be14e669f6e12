"""A decode step of several forward passes (llama.cpp with per-slot KV: one pass per run of
consecutive slot ids), priced pass by pass (``decode_passes: each``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builders import waiting_req
from lyra_simpy.calibration.fit import fit_profile
from lyra_simpy.calibration.llamacpp_runs import LlamaCppLayout, decode_pass_rows
from lyra_simpy.calibration.profiles import read_profile
from lyra_simpy.cost.base import BatchShape
from lyra_simpy.cost.profiled import ProfileCost, ProfileCostConfig
from lyra_simpy.policies import EngineView, LlamaCppConfig, LlamaCppServer

DATA = Path(__file__).resolve().parents[1] / "data"


def _view(waiting=(), running=()) -> EngineView:
    return EngineView(1.0, list(waiting), list(running), 10**6, 1, True)


def test_the_plan_tells_each_decode_pass_its_rows():
    s = LlamaCppServer(LlamaCppConfig(n_parallel=4))
    w = [waiting_req(i, 10, 50) for i in range(4)]
    s.plan(_view(waiting=w))  # slots 3, 2, 1, 0
    for r in w:
        r.running, r.computed_tokens, r.generated_tokens = True, 10, 1
    plan = s.plan(_view(running=w))
    assert (plan.passes, plan.pass_rows) == (1, ())  # slots 0-3: one run
    w[1].running = False  # slot 2 finished
    w[1].last_token_s = 0.5
    plan = s.plan(_view(running=[w[0], w[2], w[3]]))  # slots 3, 1, 0
    assert plan.passes == 2
    assert plan.pass_rows == (2, 1)  # slots 0-1, then 3


def test_a_rebuilt_step_tells_each_decode_pass_its_rows():
    layout = LlamaCppLayout(
        n_parallel=4, batch_tokens=2048, kv_unified=False, ubatch_tokens=512, stream_cells=1024
    )
    slots = [3, 1, 0]  # request → slot
    assert decode_pass_rows(layout, slots, [0, 1, 2]) == (2, 1)
    assert decode_pass_rows(layout, slots, [1, 2]) == ()  # slots 0-1: one pass
    unified = layout.model_copy(update={"kv_unified": True})
    assert decode_pass_rows(unified, slots, [0, 1, 2]) == ()


def _cost(tmp_path: Path, speed: float = 1.0, **cost) -> ProfileCost:
    fit = yaml.safe_load((DATA / "synthetic_fit.yaml").read_text())
    fit["coefficients"].update(per_extra_pass_ms=2.0, per_output_pass_ms=4.0)
    fit["profile"] = None
    fit["decode_batch_residual_ms"] = {1: -1.0, 2: 1.0, 3: 2.0}
    fit["decode_pass_gap_ms"] = 0.5
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(fit))
    raw = {"name": "profile", "path": str(path), "decode_table": True, "speed": speed, **cost}
    return ProfileCost(ProfileCostConfig.model_validate(raw), 4)


# 3 sequences at 100 context each, in passes of 2 and 1 (both with logits)
SPLIT = BatchShape(0, 0, 0, 3, 3, 300, 0, 2, 0, -1, 2, 0, (2, 1))


def test_each_pass_is_priced_as_a_lone_decode_step_of_its_rows(tmp_path):
    cost = _cost(tmp_path)
    # lone steps: 5 + 4 (logits) + 0.5 x rows + the table at rows; 2 rows 11, 1 row 8.5;
    # the context 0.002 x 300, the gap 0.5
    assert cost.iteration_s(SPLIT) == pytest.approx((11 + 8.5 + 0.6 + 0.5) / 1000)
    assert _cost(tmp_path, speed=2.0).iteration_s(SPLIT) == pytest.approx(2 * 20.6e-3)
    # together: 3 rows in one step (5 + 4 + 1.5 + 2 + 0.6) plus a pass (2) and its logits (4)
    together = 19.1e-3
    assert _cost(tmp_path, decode_passes="together").iteration_s(SPLIT) == pytest.approx(together)
    assert cost.iteration_s(SPLIT._replace(pass_rows=())) == pytest.approx(together)
    # without the table: together, on the linear terms alone
    plain = _cost(tmp_path, decode_table=False).iteration_s(SPLIT)
    assert plain == pytest.approx(together - 2e-3)


def test_calibrate_fits_the_gap_between_passes_from_rows_of_one_sequence_a_pass(tmp_path):
    # a host whose decode step is concave in its rows, and whose passes each cost a lone
    # step of their rows plus 0.7 ms
    def lone(n: int) -> float:
        return 20.0 + 6.0 * n - 0.5 * n * n

    gap = 0.7
    rows = ["phase,batch_size,input_tokens,context_len,latency_ms,steps,passes,checkpoints,"
            "output_passes"]  # fmt: skip
    for n in (1, 2, 3, 4):
        rows.append(f"decode,{n},0,0,{lone(n)},1,1,0,1")
    rows.append(f"decode,2,0,0,{2 * lone(1) + gap},1,2,0,2")
    rows.append(f"decode,3,0,0,{lone(2) + lone(1) + gap},1,2,0,2")  # split_decode_batch
    path = tmp_path / "p.csv"
    path.write_text("\n".join(rows) + "\n")
    fit = fit_profile(read_profile(path))
    assert fit.decode_pass_gap_ms == pytest.approx(gap)
    out = tmp_path / "fit.yaml"
    out.write_text(yaml.safe_dump(fit.model_dump(mode="json")))
    cfg = {"name": "profile", "path": str(out), "decode_table": True}
    cost = ProfileCost(ProfileCostConfig.model_validate(cfg), 4)
    # the table holds the one-pass rows only: a batch of 2 in one pass costs lone(2)
    assert cost.decode_span_s(2, 0, 2, 1)[0] * 1000 == pytest.approx(lone(2))
    split = BatchShape(0, 0, 0, 3, 3, 0, 0, 2, 0, -1, 2, 0, (2, 1))
    assert cost.iteration_s(split) * 1000 == pytest.approx(lone(2) + lone(1) + gap)
    # a profile with no such row has no gap: priced together
    path.write_text("\n".join(rows[:-2]) + "\n")
    assert fit_profile(read_profile(path)).decode_pass_gap_ms is None
    # the gap is the median over both shapes: 0.4 ms beside lone ones, 1.4 ms beside a 2
    rows[-2] = f"decode,2,0,0,{2 * lone(1) + 0.4},1,2,0,2"
    rows[-1] = f"decode,3,0,0,{lone(2) + lone(1) + 1.4},1,2,0,2"
    path.write_text("\n".join(rows) + "\n")
    assert fit_profile(read_profile(path)).decode_pass_gap_ms == pytest.approx(0.9)


def test_the_slots_a_decode_probe_pins_by_its_passes():
    from lyra_simpy.calibration.profiles import decode_slots

    assert decode_slots(3, 1) == (0, 1, 2)
    assert decode_slots(2, 2) == (0, 2)  # fragmented: a pass each
    assert decode_slots(3, 2) == (0, 1, 3)  # split: 2 + 1
    assert decode_slots(4, 2) == (0, 1, 2, 4)
    with pytest.raises(ValueError, match="passes: got 3 for a decode row of 4"):
        decode_slots(4, 3)
