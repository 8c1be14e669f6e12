"""``-kvu``'s cells placed as llama.cpp places them (``policies/kvcells.py``), and what it
changes in the ``llamacpp`` scheduler's and the step rebuild's prompt attention."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from lyra_simpy.policies import llamacpp
from lyra_simpy.policies.kvcells import KvCells, NoRoomError, PlacedLayout, Segment
from lyra_simpy.policies.llamacpp_attention import step_attention
from lyra_simpy.policies.llamacpp_config import LlamaCppConfig
from lyra_simpy.scenario import scenario_from_dict
from lyra_simpy.simulation import simulate

ROOT = Path(__file__).resolve().parents[2]


def _prompt(cells: KvCells, seq: int, n: int, first: int = 0) -> np.ndarray:
    return cells.place(np.full(n, seq), np.arange(first, first + n))


def _holds(cells: KvCells, seq: int) -> int:
    return int(np.count_nonzero(cells.seq == seq))


def _layout(cells: KvCells) -> str:
    return "".join("." if s < 0 else str(s) for s in cells.seq[: cells.used_max_p1()])


def test_decode_tokens_interleave_and_a_new_prompt_fills_its_slots_holes():
    cells = KvCells(64)
    _prompt(cells, 0, 4)
    _prompt(cells, 1, 4)
    for step in range(3):  # three decode steps of both, slot order
        cells.place([0, 1], [4 + step, 4 + step])
    assert _layout(cells) == "00001111010101"
    cells.remove(0)  # seq_rm: the head goes back to the lowest cell freed
    assert cells.head == 0
    got = _prompt(cells, 2, 6)
    assert got.tolist() == [0, 1, 2, 3, 8, 10]  # the holes first, in order from the head
    assert _layout(cells) == "222211112121.1"  # (cell 12 waits for the next token)
    assert cells.head == 11
    assert cells.used == 13


def test_the_search_starts_at_cell_zero_when_the_head_lies_far_beyond_the_used_cells():
    cells = KvCells(64)
    _prompt(cells, 0, 20)
    _prompt(cells, 1, 2)
    cells.remove(1)  # head back to 20: not beyond used (20) + 2 × n
    cells.place([2], [0])
    assert cells.seq[20] == 2
    cells.head = 40  # more than used (21) + 2 × 1 cells in: from cell 0 (no free cell
    cells.remove(0)  # below 20 until seq 0 goes; seq_rm moves the head to 0 anyway)
    cells.head = 40
    assert cells.place([3], [0]).tolist() == [0]


def test_n_kv_is_the_used_end_padded_to_256_at_least_256_at_most_the_stream():
    cells = KvCells(1024)
    assert cells.n_kv() == 256
    _prompt(cells, 0, 300)
    assert cells.n_kv() == 512
    _prompt(cells, 1, 500)
    cells.remove(0)  # the used cells' end, not their count
    assert cells.used == 500
    assert cells.n_kv() == 1024
    small = KvCells(300)
    _prompt(small, 0, 290)
    assert small.n_kv() == 300


def test_a_sliding_window_cache_reuses_cells_that_left_the_window_and_purges_below():
    cells = KvCells(8, n_swa=4)
    _prompt(cells, 0, 8)  # full: positions 0..7, the window keeps 4..7 for position 8
    got = cells.place([0], [8])  # pos_max + 1 − pos >= 4: cells of positions 0..4 usable
    assert got.tolist() == [0]
    assert cells.seq[0] == 0
    assert cells.pos[0] == 8
    assert _holds(cells, 0) == 8  # nothing below the overwritten position 0 to purge
    got = cells.place([1, 1], [0, 1])  # a new sequence takes masked cells of seq 0
    assert got.tolist() == [1, 2]
    # the purge: seq 0 loses every position at or below the highest one overwritten (2)
    assert sorted(cells.pos[cells.seq == 0].tolist()) == [3, 4, 5, 6, 7, 8]


def test_open_tiles_and_pairs_follow_the_mask():
    cells = KvCells(256)
    _prompt(cells, 0, 64)
    _prompt(cells, 1, 64)
    cells.place(np.full(64, 0), np.arange(64, 128))  # seq 0 again, tile 2
    rows, pos = np.full(64, 0), np.arange(64, 128)
    assert cells.open_tiles(rows, pos, 256) == 2  # tiles 0 and 2: tile 1 is seq 1's
    assert cells.open_tiles(np.full(1, 1), np.array([10]), 256) == 1
    # one row at position 10 sees positions 0..10 of its own sequence
    assert cells.open_pairs(1, np.array([10, 11]), 256) == 11 + 12
    swa = KvCells(256, n_swa=8)
    _prompt(swa, 0, 64)
    assert swa.open_pairs(0, np.array([20]), 256) == 8  # positions 13..20


@pytest.mark.parametrize(("decoders", "prompt"), [(0, 300), (3, 200), (2, 40), (3, 700)])
def test_on_a_packed_buffer_the_placed_counts_are_the_packed_model_s(decoders, prompt):
    config = LlamaCppConfig(n_parallel=4, n_ctx=4096, kv_unified=True)
    layout = PlacedLayout(4096, 4, config.ubatch_tokens)
    for s in range(decoders):  # each decoder's prompt, one after another: packed
        layout.step([Segment(s, 0, 100, True)])
    segments = [Segment(s, 100, 1, False) for s in range(decoders)]
    got = layout.step([*segments, Segment(3, 0, prompt, True)])
    want = step_attention(config, decoders, [(0, prompt)], 100 * decoders)
    assert got == (want.spanned, want.computed)


def test_the_layers_mean_weighs_the_sliding_window_cache_by_its_share():
    layout = PlacedLayout(4096, 4, 512, swa_window=512, swa_share=5 / 6)
    assert [c.size for c, _ in layout.caches] == [4096, 2560]
    assert [w for _, w in layout.caches] == pytest.approx([1 / 6, 5 / 6])
    spanned, _ = layout.step([Segment(0, 0, 300, True)])
    assert spanned == 300 * 512  # both caches span 512 cells


def _kvu_long(arrival: dict, layout: str, fuse: bool = True) -> dict:
    return {
        "name": "kvu_long",
        "seed": 11,
        "engine": {"name": "llamacpp", "command": "llama-server -np 4 -c 4096 -t 2 -kvu"},
        "workload": {
            "num_requests": 40,
            "arrival": arrival,
            "input_tokens": {"name": "uniform", "low": 200, "high": 400},
            "output_tokens": {"name": "uniform", "low": 80, "high": 120},
        },
        "scheduler": {
            "name": "llamacpp",
            "sliding_window": True,
            "cache_prompt": False,
            "kv_layout": layout,
        },
        "cost": {
            "name": "linear",
            "base_ms": 5.0,
            "per_seq_ms": 8.0,
            "per_prefill_token_ms": 1.0,
        },
        "simulation": {"fuse_iterations": fuse},
    }


def _prompt_steps(raw: dict, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    got: list[tuple[int, int, int]] = []
    plan = llamacpp.LlamaCppServer.plan

    def spy(self, view):
        p = plan(self, view)
        if p.prefill:
            got.append(
                (sum(t for _, t in p.prefill), p.prefill_attention_cells, p.prefill_computed_cells)
            )
        return p

    with monkeypatch.context() as m:
        m.setattr(llamacpp.LlamaCppServer, "plan", spy)
        simulate(scenario_from_dict(copy.deepcopy(raw), ROOT))
    return got


CLOSED_4 = {"name": "closed_loop", "concurrency": 4, "think_time_s": 0.005}


def test_under_load_a_prompt_computes_more_tiles_placed_than_packed(monkeypatch):
    packed = _prompt_steps(_kvu_long(CLOSED_4, "packed"), monkeypatch)
    placed = _prompt_steps(_kvu_long(CLOSED_4, "placed"), monkeypatch)
    assert [t for t, _, _ in placed] == [t for t, _, _ in packed]  # same steps (linear cost)
    ratio = sum(c for _, _, c in placed) / sum(c for _, _, c in packed)
    # its holes spread over the decoders' interleaved tokens: measured 1.46 here
    assert 1.3 < ratio < 1.7
    # n_kv: the used cells' end, never before their count (packed); beyond it where a
    # freed request left holes that the new prompt did not fill
    assert all(a[1] >= b[1] for a, b in zip(placed, packed, strict=True))
    assert sum(s for _, s, _ in placed) > sum(s for _, s, _ in packed)


def test_one_request_at_a_time_is_packed_either_way(monkeypatch):
    slow = {"name": "poisson", "rate_per_s": 0.01}
    assert _prompt_steps(_kvu_long(slow, "placed"), monkeypatch) == _prompt_steps(
        _kvu_long(slow, "packed"), monkeypatch
    )


def test_fused_decode_steps_place_their_tokens_as_planned_ones_do(monkeypatch):
    fused = _prompt_steps(_kvu_long(CLOSED_4, "placed", fuse=True), monkeypatch)
    planned = _prompt_steps(_kvu_long(CLOSED_4, "placed", fuse=False), monkeypatch)
    assert fused == planned


def test_the_step_rebuild_replays_the_cells_the_scheduler_placed(monkeypatch, tmp_path):
    from builders import write_run
    from lyra_simpy.calibration.runs import StepRebuild, rebuild_for, rebuild_steps
    from lyra_simpy.calibration.streams import read_run

    raw = _kvu_long(CLOSED_4, "placed")
    raw["workload"]["num_requests"] = 16
    planned = _prompt_steps(raw, monkeypatch)
    scenario = scenario_from_dict(copy.deepcopy(raw), ROOT)
    res = simulate(scenario)
    requests = read_run(write_run(res, tmp_path / "run"))
    rebuild = rebuild_for(scenario.scheduler)
    assert rebuild["llamacpp"].placed
    steps = rebuild_steps(requests, StepRebuild(gap_ms=1.0, **rebuild))
    with_prompt = steps.prefill_tokens > 0
    # a step whose prompt was cut for its checkpoint hides its first chunk in the rebuilt
    # step of its last: the sums over the run are what both count
    assert int(steps.prefill_tokens.sum()) == sum(t for t, _, _ in planned)
    assert int(steps.prefill_computed_cells[with_prompt].sum()) == sum(c for _, _, c in planned)
    assert int(steps.prefill_attention_cells[with_prompt].sum()) == sum(s for _, s, _ in planned)
    packed = StepRebuild(gap_ms=1.0, **{**rebuild, "llamacpp": rebuild["llamacpp"].model_copy(
        update={"kv_layout": "packed"})})  # fmt: skip
    assert rebuild_steps(requests, packed).prefill_computed_cells.sum() < sum(
        c for _, _, c in planned
    )


def _cells_tool():
    import importlib.util
    import sys

    path = ROOT / "validation" / "llamacpp_cells.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("llamacpp_cells", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cell_probe_reads_the_servers_cell_maps():
    tool = _cells_tool()
    row = "0000111101" + "." * 246 + " *"
    log = "\n".join(
        [
            "0.01.000.000 D find_slot: stream[0], n =    10, used =     9, head =    10, "
            "size =  4096, n_swa =     0",
            "0.01.000.001 D find_slot: stream[0], n =    10, used =     9, head =    10, "
            "size =   256, n_swa =   512",
            "0.01.000.002 D ",
            row,
            "0.01.000.003 D find_slot: stream[0], n =    10, used =     9, head =    10, "
            "size =   256, n_swa =   512",  # (the same ubatch's second sequence)
            "0.01.000.004 D find_slot: stream[0], n =   300, used =   200, head =    10, "
            "size =   256, n_swa =   512",
        ]
    )
    found = tool.cell_maps(log)
    assert [(n["size"], n["n"], m) for n, m in found] == [
        (4096, 10, []),  # (the full-attention cache prints no map)
        (256, 10, ["0000111101" + "." * 246]),
        (256, 300, []),
    ]
    assert tool.spread("0000111101" + "." * 246) == {"0": 1.0, "1": 1.0}
    assert tool.spread("0" + "." * 63 + "0") == {"0": 2.0}
    got = tool.summarise(found)
    assert got["256"]["share_beyond_packed"] == 0.5  # pad(300) = 512 against pad(200)
    assert got["256"]["tile_spread_median"] == 1.0


def test_the_kept_probe_item_48():
    # docs/validation/llamacpp-cells-epyc.json (python validation/llamacpp_cells.py
    # --requests 16 --json ...): a closed loop of 4 long requests on -np 4 -c 4096 -t 2 -kvu;
    # the server's cell maps against the engine model's on a simulated loop of that shape
    kept = json.loads((ROOT / "docs" / "validation" / "llamacpp-cells-epyc.json").read_text())
    real, model = kept["caches"]["2560"], kept["model"]["2560"]
    assert (round(real["tile_spread_median"], 2), round(real["tile_spread_p90"], 2)) == (2.14, 2.6)
    assert (model["tile_spread_median"], model["tile_spread_p90"]) == (1.875, 2.4)
    assert real["n_kv_ratio_median"] == model["n_kv_ratio_median"] == 1.0
    assert (round(real["share_beyond_packed"], 2), round(model["share_beyond_packed"], 2)) == (
        0.07,
        0.3,
    )


def test_idle_slots_cells_give_way_when_the_buffer_is_full():
    # --cache-ram 0: nothing clears an idle slot's cells before its next request, and each
    # new request takes the least recently used slot; three prompts of 450 cells fill
    # 1024. llama.cpp would fail the batch; the model frees the idle slots' cells
    cells = KvCells(1024)
    _prompt(cells, 0, 450)
    _prompt(cells, 1, 450)
    with pytest.raises(NoRoomError):
        _prompt(cells, 2, 450)
    layout = PlacedLayout(1024, 4, 512)
    layout.step([Segment(0, 0, 450, True)])
    layout.step([Segment(1, 0, 450, True)])
    layout.step([Segment(2, 0, 450, True)], idle=[0])
    assert _holds(layout.caches[0][0], 0) == 0
    assert _holds(layout.caches[0][0], 2) == 450
    raw = _kvu_long({"name": "poisson", "rate_per_s": 0.05}, "placed")
    raw["engine"]["command"] = "llama-server -np 4 -c 1024 -t 2 -kvu --cache-ram 0"
    raw["workload"]["input_tokens"] = {"name": "uniform", "low": 400, "high": 500}
    res = simulate(scenario_from_dict(raw, ROOT))
    assert (res.records["status"] == "ok").all()
