"""llama.cpp's prompt cache in RAM (item 63): which slot states a launch copies
(policies/llamacpp_save.py, from server-context.cpp's get_available_slot and the task
launch), what the ``profile`` cost charges for them, and the probe's fit
(calibration/savefit.py) — numbers worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from builders import llamacpp_fixed, waiting_req
from lyra_simpy import simulate
from lyra_simpy.calibration.savefit import fitted_save, read_save
from lyra_simpy.cost.base import BatchShape
from lyra_simpy.cost.profiled import ProfileCost, ProfileCostConfig
from lyra_simpy.errors import LyraError
from lyra_simpy.live.llamacpp_probes import llamacpp_config, save_sizes
from lyra_simpy.live.profile_grid import ProfileGrid
from lyra_simpy.policies import EngineView, LlamaCppConfig, LlamaCppServer
from lyra_simpy.scenario import scenario_from_dict

DATA = Path(__file__).resolve().parents[1] / "data"


def view(waiting=(), running=(), now_s=1.0) -> EngineView:
    return EngineView(now_s, list(waiting), list(running), 10**6, 1, True)


def _four_then_two_finish(config: LlamaCppConfig) -> tuple[LlamaCppServer, list]:
    """Four requests in slots 3, 2, 1, 0; slot 3's (w0) ends at 5 s with 120 tokens in its
    state, slot 1's (w2) at 6 s with 70."""
    s = LlamaCppServer(config)
    w = [waiting_req(i, 10) for i in range(4)]
    assert s.plan(view(waiting=w)).saved_tokens == 0  # a fresh server holds nothing
    for r in w:
        r.running = True
    for r, end, tokens in ((w[0], 5.0, 120), (w[2], 6.0, 70)):
        r.running, r.last_token_s, r.computed_tokens = False, end, tokens
    return s, w


def test_a_launch_saves_its_slot_and_every_idle_slot_not_saved_yet():
    s, w = _four_then_two_finish(LlamaCppConfig(n_parallel=4))
    # the new request takes slot 3 (LRU): its 120 tokens are saved, then idle slot 1's 70
    new = waiting_req(10, 10)
    plan = s.plan(view(waiting=[new], running=[w[1], w[3]], now_s=7.0))
    assert s.slots[3] is new
    assert plan.saved_tokens == 190
    # the next launch (slot 1) finds its state already in the cache: nothing copied
    plan = s.plan(view(waiting=[waiting_req(11, 10)], running=[w[1], w[3], new], now_s=8.0))
    assert plan.saved_tokens == 0
    # a plan with no launch copies nothing either
    assert s.plan(view(running=[w[1], w[3], new], now_s=9.0)).saved_tokens == 0


@pytest.mark.parametrize(
    ("knobs", "saved"),
    [
        ({"cache_ram_mib": 0}, 0),  # no cache: nothing copied
        ({"cache_idle_slots": False}, 120),  # only the slot chosen by LRU
        ({"kv_unified": True}, 190),  # -kvu: saved, then cleared
    ],
)
def test_what_a_launch_saves_follows_the_cache_flags(knobs, saved):
    s, w = _four_then_two_finish(LlamaCppConfig(n_parallel=4, **knobs))
    plan = s.plan(view(waiting=[waiting_req(10, 10)], running=[w[1], w[3]], now_s=7.0))
    assert plan.saved_tokens == saved


def _fit(tmp_path: Path, ms_per_token: float | None) -> Path:
    fit = yaml.safe_load((DATA / "synthetic_fit.yaml").read_text())
    fit["profile"] = None
    if ms_per_token is not None:
        fit["prompt_save"] = {"ms_per_token": ms_per_token, "intercept_ms": 4.0,
                              "prompts": 8, "median_wait_ms": {32: 7.2, 512: 55.2}}  # fmt: skip
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(fit))
    return path


def test_the_profile_cost_charges_each_token_saved(tmp_path):
    on = ProfileCostConfig.model_validate({"name": "profile", "path": str(_fit(tmp_path, 0.1))})
    cost = ProfileCost(on, 4)
    # a lone 20-token prompt: 5 + 0.05 x 20 + 1e-4 x 400 = 6.04 ms; + 0.1 x 190 saved
    prompt = BatchShape(1, 20, 400, 0, 0, 0)
    assert cost.iteration_s(prompt) == pytest.approx(6.04e-3)
    saved = prompt._replace(saved_tokens=190)
    assert cost.iteration_s(saved) == pytest.approx(25.04e-3)
    # a decode-only step after a launch whose prompt found no room: 5 + 0.5 + 0.2 + 19
    decode = BatchShape(0, 0, 0, 1, 1, 100, saved_tokens=190)
    assert cost.iteration_s(decode) == pytest.approx(24.7e-3)
    # off, or a fit without the probe: not charged
    off = on.model_copy(update={"prompt_save": "off"})
    assert ProfileCost(off, 4).iteration_s(saved) == pytest.approx(6.04e-3)
    plain = ProfileCostConfig.model_validate({"name": "profile", "path": str(_fit(tmp_path, None))})
    assert ProfileCost(plain, 4).iteration_s(saved) == pytest.approx(6.04e-3)


def _ttfts(fit: Path, prompt_save: str) -> list[float]:
    cost = {"name": "profile", "path": str(fit), "prompt_save": prompt_save}
    raw = llamacpp_fixed(2, 0.2, (300, 3), cost)
    return [float(t) for t in simulate(scenario_from_dict(raw)).records["ttft_ms"]]


def test_a_request_after_another_finished_waits_for_its_slot_s_save(tmp_path):
    # the second request, 5 s later, is given a slot while the first's 302 tokens
    # (300 prompt, 3 outputs but the last) sit unsaved in an idle slot: 0.1 ms each
    fit = _fit(tmp_path, 0.1)
    first, second = _ttfts(fit, "fitted")
    plain = _ttfts(fit, "off")
    assert first == pytest.approx(plain[0])
    assert second - plain[1] == pytest.approx(30.2)


def test_the_save_slope_is_theil_sen_and_one_slow_row_does_not_move_it():
    tokens = np.array([32, 256, 512, 768] * 3, dtype=float)
    ms = 4.0 + 0.02 * tokens
    ms[5] += 40.0  # one round of 256 in a slow spell
    fit = fitted_save(tokens, ms)
    assert fit is not None
    assert fit.ms_per_token == pytest.approx(0.02)
    # the intercept, median(wait) - slope x median(tokens), moves (14.24 - 7.68), but it
    # is not charged: the request path is
    assert fit.intercept_ms == pytest.approx(6.56)
    assert fit.median_wait_ms == {32: 4.64, 256: 9.12, 512: 14.24, 768: 19.36}
    # a least-squares line would follow the slow row
    assert np.polyfit(tokens, ms, 1)[0] != pytest.approx(0.02, rel=0.01)
    # a slope below 0 is no save; one size tells no slope
    assert fitted_save(tokens, 30.0 - 0.01 * tokens).ms_per_token == 0.0  # type: ignore[union-attr]
    assert fitted_save(np.full(3, 64.0), np.array([5.0, 6.0, 7.0])) is None


def test_a_bad_probe_cell_is_one_line(tmp_path):
    (tmp_path / "p.save.csv").write_text("saved_tokens,wait_ms\n32,4.1\n-5,3.0\n")
    with pytest.raises(LyraError, match=r"row 3: saved_tokens: got '-5', must be a number >= 0"):
        read_save(tmp_path / "p.csv")
    assert read_save(tmp_path / "q.csv") is None


def test_the_probe_s_sizes_fit_a_slot():
    grid = ProfileGrid()
    # -np 4 -c 4096: slots of 1 024 cells, all four sizes fit; -np 8 -c 2048: 256
    assert save_sizes(grid, llamacpp_config("-np 4 -c 4096", grid)) == [32, 256, 512, 768]
    with pytest.raises(LyraError, match=r"grid.save_prompt_tokens: got \[512, 768\], none fits"):
        save_sizes(grid.model_copy(update={"save_prompt_tokens": [512, 768]}),
                   llamacpp_config("-np 8 -c 2048", grid))  # fmt: skip
    assert save_sizes(grid, llamacpp_config("-np 8 -c 2048", grid)) == [32]
    assert save_sizes(grid, None) == []


def test_the_standalone_probe_leaves_a_profile_s_own_probe_alone(tmp_path, capsys, monkeypatch):
    # validation/llamacpp_save_probe.py: a point whose profile took the probe itself
    # (its metadata has save_probe, item 64) keeps its profile.save.csv; no server starts
    from builders import validation_module

    script = validation_module("llamacpp_save_probe")
    point = tmp_path / "default_long"
    point.mkdir()
    (point / "grid.yaml").write_text("{}\n")
    (point / "profile.yaml").write_text(yaml.safe_dump({"save_probe": {"sizes": [32]}}))
    (point / "profile.save.csv").write_text("saved_tokens,wait_ms\n32,4.0\n")
    monkeypatch.setattr(script, "OUT", tmp_path)
    assert script.main(["--points", "default_long"]) == 0
    assert "its profile took the probe itself" in capsys.readouterr().out
    assert (point / "profile.save.csv").read_text() == "saved_tokens,wait_ms\n32,4.0\n"
    # --collect gathers only the probes taken alone (save_probe.json beside them)
    assert script.main(["--points", "default_long", "--collect", str(tmp_path / "c.json")]) == 0
    assert json.loads((tmp_path / "c.json").read_text()) == {}


def test_in_profile_names_a_probe_file_without_rows(tmp_path, monkeypatch):
    # validation/llamacpp_save_probe.py --in-profile: a profile*.save.csv with no rows
    # is one line naming the file, not an AssertionError
    from builders import validation_module

    script = validation_module("llamacpp_save_probe")
    point = tmp_path / "default_long"
    point.mkdir()
    (point / "grid.yaml").write_text("{}\n")
    (point / "profile.save.csv").write_text("saved_tokens,wait_ms\n")
    (point / "llama-server.log").write_text("")
    monkeypatch.setattr(script, "OUT", tmp_path)
    with pytest.raises(SystemExit, match=r"profile\.save\.csv: no prompt-cache rows"):
        script.main(["--points", "default_long", "--in-profile", str(tmp_path / "o.json")])
