"""llama.cpp's prompt cache in RAM as it fills (item 87): a state's size
(LlamaCppConfig.state_kib, from the sizes the matrix's logs show), the cache dropping its
oldest states (server_prompt_cache::alloc), each save split into memory the cache held
before and fresh memory (policies/llamacpp_save.py), the profile cost pricing the two,
and the probe taken again on a full cache — numbers worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builders import llamacpp_fixed, waiting_req
from lyra_simpy import simulate
from lyra_simpy.cost.base import BatchShape
from lyra_simpy.cost.profiled import ProfileCost, ProfileCostConfig
from lyra_simpy.errors import LyraError
from lyra_simpy.live.llamacpp_probes import fill_size, llamacpp_config
from lyra_simpy.live.profile_grid import ProfileGrid
from lyra_simpy.policies import EngineView, LlamaCppConfig, LlamaCppServer
from lyra_simpy.policies.llamacpp_save import PromptCacheSaves
from lyra_simpy.scenario import scenario_from_dict

DATA = Path(__file__).resolve().parents[1] / "data"
GEMMA = {"sliding_window": True, "kv_kib_per_cell": 18.0, "swa_layer_share": 15 / 18}
"""Gemma 3 270M: 18 layers of one KV head of 256 (f16: 18 KiB a cell), 15 of them
sliding-window layers of 512 cells."""


def test_a_state_s_size_is_its_cells_and_its_checkpoints():
    c = LlamaCppConfig(**GEMMA)
    # 400 tokens (a prompt of 399 and one output), its checkpoint 4 before the prompt's
    # end: 3 KiB x 400 + 15 x 400 + 15 x 395 = 13 125 KiB = 12.82 MiB (the log: 12.847)
    assert c.state_kib(400, c.checkpoint_kib(395)) == pytest.approx(13125)
    # 800: the sliding-window layers keep 512 cells; checkpoints at 284 and 796 cells
    # 3 x 800 + 15 x 512 + 15 x 284 + 15 x 512 = 22 020 KiB = 21.50 MiB (the log: 21.529)
    ckpt = c.checkpoint_kib(284) + c.checkpoint_kib(796)
    assert c.state_kib(800, ckpt) == pytest.approx(22020)
    # without sliding-window layers every cell of every layer, and no checkpoints
    assert LlamaCppConfig(kv_kib_per_cell=18.0).state_kib(400) == pytest.approx(7200)
    # without the model's cell size nothing is tracked
    assert LlamaCppConfig().state_kib(400) == 0.0


def view(waiting=(), running=(), now_s=1.0) -> EngineView:
    return EngineView(now_s, list(waiting), list(running), 10**6, 1, True)


def test_the_scheduler_sizes_a_finished_request_s_state_with_its_checkpoint():
    s = LlamaCppServer(LlamaCppConfig(n_parallel=2, **GEMMA))
    req = waiting_req(0, 300)
    s.plan(view(waiting=[req]))  # 296 tokens, then the last 4 with a checkpoint
    req.running = True
    req.computed_tokens = 296
    plan = s.plan(view(running=[req]))
    assert plan.checkpoints == 1
    req.computed_tokens, req.running, req.last_token_s = 302, False, 2.0
    s.plan(view(running=[]))
    # 3 x 302 + 15 x 302 + 15 x 296 (the checkpoint) = 9 876 KiB
    slot = s.last_used_s.index(2.0)
    assert s.saves.unsaved[slot] == 302
    assert s.saves.unsaved_kib[slot] == pytest.approx(9876)


def _saves(limit_mib: int, start_mib: float = 0.0) -> PromptCacheSaves:
    return PromptCacheSaves(2, limit_mib, True, tracked=True, start_mib=start_mib, ctx_total=300)


def _save(saves: PromptCacheSaves, tokens: int, kib: float) -> tuple[int, int]:
    saves.release(1, tokens, kib)
    saves.launch(1, [None, object()])
    return saves.take()


def test_a_full_cache_drops_its_oldest_states_and_saves_into_their_memory():
    saves = _saves(1)  # 1 024 KiB
    # two states of 400 KiB: fresh memory, the cache growing to 800 KiB
    assert _save(saves, 100, 400.0) == (100, 0)
    assert _save(saves, 100, 400.0) == (100, 0)
    # a third does not fit: the oldest is dropped and its memory holds the new one
    assert _save(saves, 100, 400.0) == (100, 100)
    # 600 KiB: the next oldest dropped, 400 KiB held, 400 below the high-water mark of
    # 800: 400 KiB reused, 200 fresh, so two thirds of its 150 tokens
    assert _save(saves, 150, 600.0) == (150, 100)
    # a state larger than the whole cache is not saved: nothing copied
    assert _save(saves, 500, 2000.0) == (0, 0)


def test_a_run_that_starts_full_saves_into_memory_held_before_from_the_first_save():
    assert _save(_saves(1, start_mib=8192.0), 100, 400.0) == (100, 100)
    # half full: the first save fits beside it, fresh
    assert _save(_saves(1, start_mib=0.5), 100, 400.0) == (100, 0)
    # untracked (no kv_kib_per_cell): every token fresh, whatever the cache holds
    untracked = PromptCacheSaves(2, 1, True)
    assert _save(untracked, 100, 0.0) == (100, 0)


def test_without_a_byte_limit_the_cache_keeps_n_ctx_tokens():
    saves = _saves(-1)  # --cache-ram -1, n_ctx 300 tokens
    assert _save(saves, 200, 800.0) == (200, 0)
    # 400 tokens held: the oldest dropped after the save (update), the save fresh
    assert _save(saves, 200, 800.0) == (200, 0)
    # the next reuses what that drop freed
    assert _save(saves, 200, 800.0) == (200, 200)
    # a start fill there: the first save is fresh (the limit is kept after the copy),
    # and drops the fill whole, whose memory the next save reuses
    full = _saves(-1, start_mib=1.0)
    assert _save(full, 200, 800.0) == (200, 0)
    assert _save(full, 200, 800.0) == (200, 200)


def _fit(tmp_path: Path, reused: float | None) -> Path:
    fit = yaml.safe_load((DATA / "synthetic_fit.yaml").read_text())
    fit["profile"] = None
    fit["prompt_save"] = {"ms_per_token": 0.1, "intercept_ms": 4.0, "prompts": 8,
                          "median_wait_ms": {32: 7.2, 512: 55.2}}  # fmt: skip
    if reused is not None:
        fit["prompt_save"]["reused_ms_per_token"] = reused
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(fit))
    return path


def test_the_profile_cost_prices_tokens_saved_into_held_memory_at_the_reused_price(tmp_path):
    cost = ProfileCost(
        ProfileCostConfig.model_validate({"name": "profile", "path": str(_fit(tmp_path, 0.01))}),
        4,
    )
    # a lone 20-token prompt: 6.04 ms; 190 saved, 100 of them into held memory:
    # 0.1 x 90 + 0.01 x 100 = 10 ms
    prompt = BatchShape(1, 20, 400, 0, 0, 0)
    shape = prompt._replace(saved_tokens=190, saved_reused_tokens=100)
    assert cost.iteration_s(shape) == pytest.approx(16.04e-3)
    # a fit without the reused price charges them all at ms_per_token
    plain = ProfileCost(
        ProfileCostConfig.model_validate({"name": "profile", "path": str(_fit(tmp_path, None))}),
        4,
    )
    assert plain.iteration_s(shape) == pytest.approx(25.04e-3)


def _ttfts(fit: Path, **scheduler) -> list[float]:
    cost = {"name": "profile", "path": str(fit)}
    raw = llamacpp_fixed(3, 0.2, (300, 3), cost, sliding_window=True, **scheduler)
    return [float(t) for t in simulate(scenario_from_dict(raw)).records["ttft_ms"]]


def test_a_server_that_starts_full_pays_the_reused_price_for_every_save(tmp_path):
    # each request after the first is given a slot while its predecessor's 302 tokens
    # sit unsaved: 0.1 ms a token fresh, 0.01 into memory a full cache held
    fit = _fit(tmp_path, 0.01)
    fresh = _ttfts(fit)
    full = _ttfts(fit, prompt_cache_start_mib=8192.0, kv_kib_per_cell=18.0)
    assert full[0] == pytest.approx(fresh[0])
    assert fresh[1] - full[1] == pytest.approx(0.09 * 302)
    assert fresh[2] - full[2] == pytest.approx(0.09 * 302)
    # a fresh server with its states tracked: 8 GiB holds them all, each save fresh
    grown = _ttfts(fit, kv_kib_per_cell=18.0)
    assert grown == pytest.approx(fresh)


def test_the_fill_s_prompt_fits_a_slot_and_needs_a_byte_limit():
    grid = ProfileGrid(save_fill_prompts=548)
    llama = llamacpp_config("-np 4 -c 4096", grid)
    assert fill_size(grid, llama, [32, 256, 512, 768]) == 768
    assert fill_size(grid.model_copy(update={"save_fill_tokens": 512}), llama, [32]) == 512
    assert fill_size(ProfileGrid(), llama, [32, 768]) is None  # none asked for
    assert fill_size(grid, llama, []) is None  # no probe to take again
    with pytest.raises(LyraError, match=r"grid.save_fill_tokens: got 1024, .* at most 1023"):
        fill_size(grid.model_copy(update={"save_fill_tokens": 1024}), llama, [32])
    with pytest.raises(LyraError, match=r"grid.save_fill_prompts: got 548, .*--cache-ram is -1"):
        fill_size(grid, llamacpp_config("-np 4 -c 4096 --cache-ram -1", grid), [32])


def test_the_matrix_fills_enough_for_8_gib_and_starts_its_runs_full(tmp_path):
    from builders import validation_module

    points = validation_module("llamacpp_points")
    matrix = validation_module("llamacpp_matrix")
    # a 512-token prompt's state with its checkpoint: 3 x 512 + 15 x 512 + 15 x 508 =
    # 16 836 KiB; 8 GiB and a tenth over it: 548.1, so 549
    assert points.fill_prompts() == 549
    flags = points.CONFIGS["default"]
    assert "save_fill_prompts" not in matrix.grid(flags, points.REGIMES["long"])
    matrix.FILL = True
    try:
        got = matrix.grid(flags, points.REGIMES["long"])
    finally:
        matrix.FILL = False
    assert (got["save_fill_prompts"], got["save_fill_tokens"]) == (549, 512)
    # Table 1's scenarios start full where the point's fit has the reused price
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full, fresh = _fit(tmp_path / "a", 0.01), _fit(tmp_path / "b", None)
    regime = points.REGIMES["long"]
    sched = points.scenario("poisson_0.3", flags, regime, False, str(full), "poisson_0.3", 1.0)
    assert sched["scheduler"]["kv_kib_per_cell"] == 18.0
    assert sched["scheduler"]["prompt_cache_start_mib"] == 8192
    plain = points.scenario("poisson_0.3", flags, regime, False, str(fresh), "poisson_0.3", 1.0)
    assert "kv_kib_per_cell" not in plain["scheduler"]


def test_the_dropped_states_are_the_saved_ones_in_order_at_the_model_s_sizes(tmp_path):
    from builders import llamacpp_log_line, validation_module

    price = validation_module("llamacpp_save_price")
    # slot 0: a prompt of 300, 399 tokens at its end: 3 x 399 + 15 x 399 + 15 x 296 (its
    # checkpoint) = 11 622 KiB; slot 1: a prompt of 600, chunks of 84, 512 and 4, its
    # checkpoints at 84 and 596 cells, 700 tokens: 3 x 700 + 15 x 512 + 15 x 84 + 15 x 512
    # = 18 720 KiB; both saved at the third launch, dropped later as the log says
    prompt = "prompt eval time =  {0}.00 ms /   {0} tokens"
    lines = [
        llamacpp_log_line(1.0, "launch_slot_", 0, "processing task, is_child = 0", 1),
        llamacpp_log_line(1.5, "launch_slot_", 1, "processing task, is_child = 0", 2),
        llamacpp_log_line(2.0, "print_timing", 0, prompt.format(300), 1),
        llamacpp_log_line(2.1, "release", 0, "stop processing: n_tokens = 399, truncated = 0", 1),
        llamacpp_log_line(2.2, "print_timing", 1, prompt.format(600), 2),
        llamacpp_log_line(2.3, "release", 1, "stop processing: n_tokens = 700, truncated = 0", 2),
        llamacpp_log_line(3.0, "launch_slot_", 0, "processing task, is_child = 0", 3),
        "0.04.000.000 W srv         alloc:  - making room for prompt cache entry, removing "
        "oldest entry (size = 11.362 MiB)",
        "0.04.000.100 W srv         alloc:  - making room for prompt cache entry, removing "
        "oldest entry (size = 19.000 MiB)",
    ]  # fmt: skip
    log = tmp_path / "llama-server.log"
    log.write_text("\n".join(lines) + "\n")
    got = price.state_sizes(log, "default")
    assert (got["dropped"], got["saved"]) == (2, 2)
    assert got["first"] == [[11.362, 11.35], [19.0, 18.281]]
    # the first within 1 % (+0.1 %), the second not (+3.9 %)
    assert (got["agree_from_first"], got["within_1pct"]) == (1, 1)


@pytest.mark.parametrize("key", ["default/long", "kvu/long", "np2_b64/long"])
def test_item_87s_sizes_are_the_published_logs(tmp_path, key):
    # python validation/llamacpp_save_price.py --sizes ... on the published points'
    # logs (docs/validation/points): at -kvu long and -np 2 -b 64 long every state the
    # cache dropped is the engine model's size of the one saved in its turn, to within
    # 1 %; at -np 4 long the first 16, and all once one state is passed over
    import json
    import tarfile

    from builders import validation_module

    price = validation_module("llamacpp_save_price")
    folder = key.replace("/", "_")
    root = Path(__file__).resolve().parents[2] / "docs" / "validation"
    with tarfile.open(root / "points" / f"{folder}.tar.xz") as archive:
        log = archive.extractfile(f"{folder}/llama-server.log")
        assert log is not None
        (tmp_path / "llama-server.log").write_bytes(log.read())
    got = price.state_sizes(tmp_path / "llama-server.log", key.split("/")[0])
    kept = json.loads((root / "llamacpp-state-sizes-item87.json").read_text())["sizes"]
    assert got == kept[key]
    # -np 4 long's 17th: one saved state of 4 tokens is not in the cache's order; with
    # it passed over, all 601 agree
    assert (got["agree_from_first"], got["within_1pct_passing_over"], got["passed_over"],
            got["dropped"]) == {
        "default/long": (16, 601, 1, 601), "kvu/long": (546, 546, 0, 546),
        "np2_b64/long": (383, 383, 0, 383),
    }[key]  # fmt: skip


def test_item_87s_kept_run_gives_the_document_s_figures(tmp_path):
    # docs/validation/llamacpp-fill-item87.tar.xz: the profile with --fill's second probe,
    # and its server's log; the document quotes both prices and the sizes check
    import json
    import tarfile

    from builders import validation_module
    from lyra_simpy.calibration.fit import fit_profile
    from lyra_simpy.calibration.profiles import read_profile

    root = Path(__file__).resolve().parents[2]
    with tarfile.open(root / "docs" / "validation" / "llamacpp-fill-item87.tar.xz") as archive:
        for member in archive.getmembers():  # (plain files only)
            data = archive.extractfile(member)
            assert data is not None
            (tmp_path / Path(member.name).name).write_bytes(data.read())
    save = fit_profile(read_profile(tmp_path / "profile-superseded-1.csv")).prompt_save
    assert save is not None
    assert (save.ms_per_token, save.reused_ms_per_token) == (0.086125, 0.015968)
    meta = yaml.safe_load((tmp_path / "profile-superseded-1.yaml").read_text())
    assert meta["save_probe"]["fill"] == {"prompts": 549, "prompt_tokens": 512}
    price = validation_module("llamacpp_save_price")
    got = price.state_sizes(tmp_path / "llama-server.log", "default")
    kept = json.loads(
        (root / "docs" / "validation" / "llamacpp-state-sizes-fill-item87.json").read_text()
    )
    assert got == kept["sizes"]["default/long"]
    assert (got["first_drop_after_saves"], got["model_first_drop_after_saves"]) == (745, 746)
    assert (got["within_1pct_passing_over"], got["dropped"]) == (698, 698)
    doc = " ".join((root / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "**0.0861 ms a token** on the fresh cache and **0.0160** on the full one" in doc
    assert "the log first drops a state after 745 saves, the engine model's sizes after 746" in doc


def test_item_87s_real_runs_on_a_full_cache_give_the_document_s_figures(tmp_path):
    # the point run with --fill (docs/validation/llamacpp-fill-runs-item87.tar.xz and the
    # matrix JSONs kept apart): both prices from its profile, what each run's saves paid,
    # and Table 1 against the same with every save at the fresh price
    import json
    import tarfile

    from builders import validation_module
    from lyra_simpy.calibration.fit import fit_profile
    from lyra_simpy.calibration.profiles import read_profile

    root = Path(__file__).resolve().parents[2]
    kept = root / "docs" / "validation"
    with tarfile.open(kept / "llamacpp-fill-runs-item87.tar.xz") as archive:
        for name in ("profile.csv", "profile.yaml", "profile.save.csv", "profile.save_full.csv"):
            data = archive.extractfile(name)
            assert data is not None
            (tmp_path / name).write_bytes(data.read())
    save = fit_profile(read_profile(tmp_path / "profile.csv")).prompt_save
    assert save is not None
    assert (save.ms_per_token, save.reused_ms_per_token) == (0.1009, 0.011648)
    runs = json.loads((kept / "llamacpp-save-price-by-run-item87.json").read_text())["by_run"]
    paid = [r["ms_per_token"] for load in runs["default/long"].values() for r in load]
    assert (min(paid), max(paid)) == (0.0215, 0.036)
    points = validation_module("llamacpp_points")
    cells, ttft = {}, {}
    for name in ("item87", "item87-fresh"):
        res = json.loads((kept / f"llamacpp-matrix-epyc-{name}.json").read_text())
        point = res["results"]["default/long"]
        assert points.point_repeats(point, res["facts"]["repeats"]) == 1
        cells[name] = sum(
            sum(points.in_target(point["loads"][load]["table"]).values()) for load in points.LOADS
        )
        row = {r["metric"]: r for r in point["loads"]["poisson_0.3"]["table"]}
        ttft[name] = round(100 * row["median_ttft_ms"]["error"], 1)
    assert cells == {"item87": 14, "item87-fresh": 13}
    assert ttft == {"item87": 5.1, "item87-fresh": 10.3}
    doc = " ".join((root / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "paid **0.0215–0.0360 ms a token** for their own-slot saves" in doc
    assert "Table 1 held 14 of 35" in doc
    assert "against 13 with every save at the fresh" in doc
    assert "the p50 TTFT error went from +10.3 % to +5.1 %" in doc
