"""calibrate --from-runs: engine steps rebuilt from token times, then fitted.

The runs are the simulator's own: a scenario costed by a known ``profile`` fit is
simulated, and its token times are written as a replay writes them (requests.jsonl +
tokens.jsonl). Rebuilding and fitting must give back the coefficients it was run with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from builders import runs_raw, write_run
from lyra_simpy import Results, scenario_from_dict, simulate
from lyra_simpy.calibration.fitfile import load_fit, write_fit
from lyra_simpy.calibration.fitmodel import TERMS
from lyra_simpy.calibration.fitruns import fit_runs
from lyra_simpy.calibration.llamacpp_runs import LlamaCppLayout, replay_slots
from lyra_simpy.calibration.runs import StepRebuild, rebuild_for, rebuild_steps, steps_of_runs
from lyra_simpy.calibration.streams import StreamedRequest, read_run
from lyra_simpy.cli import main
from lyra_simpy.metrics.io import write_jsonl

DATA = Path(__file__).resolve().parents[1] / "data"
TRUE = {  # tests/data/synthetic_fit.yaml
    "fixed_ms": 5.0,
    "per_decode_seq_ms": 0.5,
    "per_context_token_ms": 0.002,
    "per_prefill_token_ms": 0.05,
    "per_prefill_attention_ms": 1e-4,
}


def scenario(seed: int, rate: float, n: int = 120) -> Any:
    return scenario_from_dict(runs_raw(seed, rate, n))


def lone_chunked_run(folder: Path) -> tuple[Results, list[StreamedRequest]]:
    """Six prompts of 600 tokens, one at a time, in chunks of 256 (vLLM's chunked prefill
    with a 256-token budget), written as a replay writes them and read back."""
    raw = runs_raw(5, 0.5, 6)
    raw["workload"]["input_tokens"] = {"name": "fixed", "tokens": 600}
    raw["workload"]["output_tokens"] = {"name": "fixed", "tokens": 3}
    raw["scheduler"] = {"name": "chunked_prefill", "max_num_seqs": 4, "max_num_batched_tokens": 256}
    res = simulate(scenario_from_dict(raw))
    return res, read_run(write_run(res, folder))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, Results]]:
    root = tmp_path_factory.mktemp("runs")
    out = []
    for k, (seed, rate) in enumerate([(1, 6.0), (2, 14.0)]):
        res = simulate(scenario(seed, rate))
        assert (res.records["status"] == "ok").all()
        out.append((write_run(res, root / f"run{k}"), res))
    return out


def test_rebuilt_steps_are_the_simulated_iterations(runs):
    folder, res = runs[1]
    steps = rebuild_steps(read_run(folder), StepRebuild())
    series = res.timeseries
    # every iteration emits a token here, so each is one rebuilt step, same shape and time
    assert len(steps) == len(series["end_s"])
    np.testing.assert_array_equal(steps.decode_seqs, series["decode_seqs"])
    np.testing.assert_array_equal(steps.prefill_tokens, series["prefill_tokens"])
    np.testing.assert_allclose(
        steps.latency_ms, (series["end_s"] - series["start_s"]) * 1000.0, rtol=1e-9
    )
    assert (steps.phase == "runs:mixed").any()
    assert (steps.phase == "runs:decode").any()


def test_fit_on_runs_recovers_the_coefficients(runs, tmp_path):
    fit = fit_runs([f for f, _ in runs])
    got = fit.coefficients.model_dump()
    for term in TERMS:
        assert got[term] == pytest.approx(TRUE[term], rel=0.01), term
    assert fit.profile is None
    assert fit.runs is not None
    assert fit.runs.steps > 200
    assert fit.fit.phases["runs:decode"].max_rel_error < 1e-6


def test_fit_survives_network_jitter_within_a_few_percent(runs, tmp_path):
    # every chunk up to 0.3 ms late, at random; steps are >= 5 ms
    folders = [
        write_run(res, tmp_path / f"j{k}", jitter_s=0.0003, seed=k)
        for k, (_, res) in enumerate(runs)
    ]
    fit = fit_runs(folders)
    got = fit.coefficients.model_dump()
    for term in TERMS:
        assert got[term] == pytest.approx(TRUE[term], rel=0.05), term
    assert fit.fit.phases["runs:decode"].median_rel_error < 0.03


def test_idle_start_drop_leaves_out_steps_begun_on_an_arrival(runs):
    requests = read_run(runs[0][0])
    kept = rebuild_steps(requests, StepRebuild())
    dropped = rebuild_steps(requests, StepRebuild(idle_start="drop"))
    assert 0 < len(dropped) < len(kept)
    assert dropped.dropped == len(kept) - len(dropped)
    assert kept.dropped == 0
    assert (dropped.prefill_seqs + dropped.decode_seqs > 0).all()


def test_each_step_counts_the_requests_sent_while_it_ran():
    # steps end at 20, 40, 60 ms; B is sent at 25 ms (inside the second step: a decode
    # of A), C at 40 ms (the third step's start counts, its end does not)
    a = StreamedRequest(0.0, 8, 0, [0.020, 0.040, 0.060], [1, 1, 1])
    b = StreamedRequest(0.025, 8, 0, [0.060], [1])
    c = StreamedRequest(0.040, 8, 0, [0.060], [1])
    steps = rebuild_steps([a, b, c], StepRebuild(gap_ms=5.0))
    assert steps.decode_seqs.tolist() == [0, 1, 1]
    assert steps.arrivals.tolist() == [1, 1, 1]  # A in the first; B; C
    assert steps.prefill_seqs.tolist() == [1, 0, 2]


def test_a_request_never_gets_two_tokens_in_one_step():
    # two tokens of one request 0.1 ms apart: two steps, whatever the gap threshold
    req = StreamedRequest(0.0, 10, 0, [0.010, 0.0101], [1, 1])
    steps = rebuild_steps([req], StepRebuild(gap_ms=5.0))
    assert len(steps) == 2
    assert steps.prefill_tokens.tolist() == [10, 0]
    assert steps.decode_context_tokens.tolist() == [0, 11]


def test_runs_and_profile_together(runs, tmp_path, capsys):
    out = tmp_path / "fit.yaml"
    prof = DATA / "synthetic_profile.csv"
    args = ["calibrate", "--from-runs", str(runs[0][0]), "--profile", str(prof)]
    assert main([*args, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "rebuilt steps" in text
    assert "runs:decode" in text
    fit = load_fit(out)
    assert fit.method == "soft_l1_log_ratio"  # --from-runs' default loss (fitruns.RUNS_LOSS)
    assert "on log(predicted/measured)" in text
    assert fit.profile is not None
    assert fit.profile.rows == 20
    assert set(fit.fit.phases) >= {"decode", "runs:decode"}
    got = fit.coefficients.model_dump()
    for term in TERMS:
        assert got[term] == pytest.approx(TRUE[term], rel=0.01), term
    # a scenario can use it, and its manifest says where it came from
    sc = scenario(1, 6.0, 10)
    sc2 = scenario_from_dict(
        {**json.loads(sc.model_dump_json()), "cost": {"name": "profile", "path": str(out)}}
    )
    assert simulate(sc2).summary["completed"] == 10


def test_bad_runs_fail_in_one_line(tmp_path, capsys):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "requests.jsonl").write_text("")
    assert main(["calibrate", "--from-runs", str(tmp_path / "old")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no tokens.jsonl" in err
    assert len(err.splitlines()) == 1
    assert main(["calibrate"]) == 2
    assert "give a profile CSV, --from-runs DIR..., or both" in capsys.readouterr().err
    folder = tmp_path / "usage"
    folder.mkdir()
    write_jsonl(
        folder / "requests.jsonl",
        [{"request_id": 0, "arrival_s": 0.0, "input_tokens": 4, "cached_tokens": 0}],
    )
    write_jsonl(
        folder / "tokens.jsonl", [{"request_id": 0, "chunk_s": [0.1], "chunk_tokens": None}]
    )
    # counted by usage: which chunk carried which token is unknown; one token a chunk
    (request,) = read_run(folder)
    assert request.approximate
    assert request.chunk_tokens == [1]
    assert rebuild_steps([request], StepRebuild()).approximated == 1


def test_a_real_replay_folder_feeds_the_rebuild(tmp_path, tiny_raw):
    from live_server import StreamServer
    from lyra_simpy.live.replay import ReplayConfig, replay

    tiny_raw["workload"] = {
        "num_requests": 4,
        "arrival": {"name": "closed_loop", "concurrency": 1},
        "input_tokens": {"name": "fixed", "tokens": 8},
        "output_tokens": {"name": "fixed", "tokens": 5},
    }
    with StreamServer(ttft_s=0.02, itl_s=0.01) as srv:
        replay(scenario_from_dict(tiny_raw), ReplayConfig(endpoint=srv.url), tmp_path / "r")
    requests = read_run(tmp_path / "r")
    assert [sum(r.chunk_tokens) for r in requests] == [5] * 4
    # one request at a time, 10 ms between tokens: one step per token
    steps = rebuild_steps(requests, StepRebuild())
    assert len(steps) == 4 * 5
    assert steps.prefill_seqs.sum() == 4
    assert np.median(steps.latency_ms[steps.decode_seqs == 1]) == pytest.approx(10.0, abs=3.0)


def test_chunked_prefill_steps_without_a_token_are_merged(tmp_path):
    # prompts of 600 tokens in chunks of 256, alone in the engine: the first two chunks
    # emit nothing, so three engine steps are rebuilt as one (docs/calibration.md §7);
    # without --prompt-budget, as one step of the whole prompt
    res, requests = lone_chunked_run(tmp_path / "c")
    steps = rebuild_steps(requests, StepRebuild())
    assert len(res.timeseries["end_s"]) == 6 * (3 + 2)
    assert len(steps) == 6 * 3
    prefill = steps.latency_ms[steps.prefill_seqs == 1]
    c = TRUE
    # measured: three steps (three fixed costs, the chunks' own attention pairs) ...
    pairs = 256 * 256 + 256 * 512 + 88 * 600
    three = (
        3 * c["fixed_ms"] + c["per_prefill_token_ms"] * 600 + c["per_prefill_attention_ms"] * pairs
    )
    np.testing.assert_allclose(prefill, three, rtol=1e-9)
    # ... read as one step of a 600-token prompt, which the true model prices otherwise
    assert steps.prefill_tokens[steps.prefill_seqs == 1].tolist() == [600] * 6
    one = c["fixed_ms"] + c["per_prefill_token_ms"] * 600 + c["per_prefill_attention_ms"] * 600**2
    assert abs(one - three) > 1.0


def test_prompt_split_cuts_at_the_stops():
    from lyra_simpy.calibration.runs import prompt_split

    assert prompt_split(300, (516, 4)) == [296, 4]
    assert prompt_split(600, (516, 4)) == [84, 512, 4]
    assert prompt_split(4, (516, 4)) == [4]
    assert prompt_split(3, (516, 4)) == [3]
    assert prompt_split(50, ()) == [50]
    assert prompt_split(0, ()) == []


def test_default_gap_follows_the_run_not_a_fixed_millisecond(runs, tmp_path):
    # every chunk up to 1.5 ms late (steps are >= 5 ms): a 1 ms cut splits steps, the
    # default (half the shortest step the streams show) does not
    res = runs[0][1]
    jittered = write_run(res, tmp_path / "late", jitter_s=0.0015, seed=3)
    requests = read_run(jittered)
    fixed = rebuild_steps(requests, StepRebuild(gap_ms=1.0))
    auto = rebuild_steps(requests, StepRebuild())
    iterations = len(res.timeseries["end_s"])
    assert len(fixed) > iterations + 50
    assert len(auto) == iterations
    shortest = np.min(res.timeseries["end_s"] - res.timeseries["start_s"]) * 1000.0
    assert 1.5 < auto.gap_ms[0] < shortest


def llamacpp_scenario(seed: int, rate: float) -> Any:
    """llama.cpp with one KV buffer and context checkpoints on a sliding-window model:
    each prompt's last 4 tokens run in a step of their own (emitting the first token)."""
    raw = runs_raw(seed, rate)
    raw["scheduler"] = {
        "name": "llamacpp",
        "n_parallel": 8,
        "kv_unified": True,
        "sliding_window": True,
        "cache_prompt": False,
    }
    return scenario_from_dict(raw)


def test_prompt_stops_rebuild_llamacpp_checkpoint_steps(tmp_path):
    runs = []
    for k, (seed, rate) in enumerate([(1, 4.0), (2, 9.0)]):
        res = simulate(llamacpp_scenario(seed, rate))
        assert (res.records["status"] == "ok").all()
        runs.append(write_run(res, tmp_path / f"l{k}"))
    # without the stops, the step that gives a first token is charged the whole prompt;
    # with them, a few prompts that arrive one step apart are still placed a step off,
    # which the robust loss shrugs off
    naive = fit_runs(runs, loss="soft_l1").coefficients.model_dump()
    assert naive["per_prefill_token_ms"] < 0.8 * TRUE["per_prefill_token_ms"]
    fit = fit_runs(runs, rebuild=StepRebuild(prompt_stops=(516, 4)), loss="soft_l1")
    got = fit.coefficients.model_dump()
    for term in ("fixed_ms", "per_decode_seq_ms", "per_prefill_token_ms"):
        assert got[term] == pytest.approx(TRUE[term], rel=0.03), term


@pytest.mark.parametrize("given", ["0,4", "516,x", "-4"])
def test_bad_prompt_stops_fail_in_one_line(runs, capsys, given):
    assert main(["calibrate", "--from-runs", str(runs[0][0]), f"--prompt-stops={given}"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--prompt-stops: got {given!r}; allowed: positive token counts" in err
    assert len(err.splitlines()) == 1


def test_prompt_stops_need_runs(capsys):
    prof = str(DATA / "synthetic_profile.csv")
    assert main(["calibrate", prof, "--prompt-stops", "516,4"]) == 2
    assert "--prompt-stops, --prompt-budget, --prompts-alone and --scenario need --from-runs" in (
        capsys.readouterr().err
    )


def test_prompt_budget_rebuilds_the_chunks_of_a_lone_prompt(tmp_path):
    # the same runs as above: with vLLM's budget given, the rebuilt step holds the three
    # engine steps (steps = 3) and the chunks' own attention pairs, which the true
    # model prices exactly
    _, requests = lone_chunked_run(tmp_path / "c")
    steps = rebuild_steps(requests, StepRebuild(prompt_budget=256))
    first = steps.prefill_tokens > 0
    assert steps.steps[first].tolist() == [3] * 6
    assert steps.prefill_attention_tokens[first].tolist() == [256 * 256 + 256 * 512 + 88 * 600] * 6
    coef = np.array([TRUE[t] for t in TERMS])
    np.testing.assert_allclose(steps.latency_ms, steps.design_matrix() @ coef, rtol=1e-9)


def test_prompt_budget_recovers_the_coefficients_of_chunked_runs(tmp_path):
    # long prompts among decodes under a 256-token budget: each prompt's first chunks
    # run in the steps before its first token, beside other requests' decodes
    runs = []
    for k, (seed, rate) in enumerate([(1, 3.0), (2, 6.0)]):
        raw = runs_raw(seed, rate)
        raw["workload"]["input_tokens"] = {"name": "uniform", "low": 300, "high": 900}
        raw["scheduler"] = {
            "name": "chunked_prefill", "max_num_seqs": 8, "max_num_batched_tokens": 256
        }  # fmt: skip
        res = simulate(scenario_from_dict(raw))
        assert (res.records["status"] == "ok").all()
        runs.append(write_run(res, tmp_path / f"b{k}"))
    naive = fit_runs(runs, loss="soft_l1").coefficients.model_dump()
    fit = fit_runs(runs, rebuild=StepRebuild(prompt_budget=256), loss="soft_l1")
    got = fit.coefficients.model_dump()
    assert abs(naive["per_prefill_token_ms"] / TRUE["per_prefill_token_ms"] - 1) > 0.2
    for term in ("fixed_ms", "per_decode_seq_ms", "per_prefill_token_ms"):
        assert got[term] == pytest.approx(TRUE[term], rel=0.05), term


def test_prompt_budget_needs_runs_and_a_count(runs, capsys):
    prof = str(DATA / "synthetic_profile.csv")
    assert main(["calibrate", prof, "--prompt-budget", "256"]) == 2
    err = capsys.readouterr().err
    assert "--prompt-budget, --prompts-alone and --scenario need --from-runs" in err
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--from-runs", str(runs[0][0]), "--prompt-budget", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("argument --prompt-budget: got '0', must be an integer >= 1")


def test_runs_with_slow_spells_give_them_back(tmp_path):
    # the simulator's own runs with spells (22 % of the steps at 1.8x, 6 steps a spell):
    # the fit keeps the typical step's coefficients and finds the spells
    spells = {"share": 0.22, "factor": 1.8, "steps": 6.0}
    runs = []
    for k, (seed, rate) in enumerate([(1, 6.0), (2, 10.0)]):
        raw = runs_raw(seed, rate, 300)
        raw["cost"]["jitter"] = {"spells": spells}
        res = simulate(scenario_from_dict(raw))
        runs.append(write_run(res, tmp_path / f"s{k}"))
    fit = fit_runs(runs, loss="soft_l1")
    got = fit.coefficients.model_dump()
    for term in ("fixed_ms", "per_decode_seq_ms"):
        assert got[term] == pytest.approx(TRUE[term], rel=0.1), term
    assert fit.noise is not None
    found = fit.noise.spells
    assert found is not None
    assert found.share == pytest.approx(0.22, abs=0.04)
    assert found.factor == pytest.approx(1.8, rel=0.05)
    assert found.steps == pytest.approx(6.0, rel=0.25)
    path = tmp_path / "fit.yaml"
    from lyra_simpy.calibration.fitfile import write_fit

    write_fit(fit, path)
    assert load_fit(path).noise.spells == found  # kept in the fit file


@pytest.mark.parametrize("field", ["spells", "wander"])
def test_spells_and_wander_fitted_need_a_fit_with_them(make_scenario, field):
    from lyra_simpy.errors import ScenarioError

    cost = {
        "name": "profile",
        "path": str(DATA / "synthetic_fit.yaml"),
        "jitter": {field: "fitted"},
    }
    with pytest.raises(ScenarioError) as info:
        make_scenario({"cost": cost})
    assert f"jitter.{field}: got 'fitted', but the fit" in str(info.value)
    assert "calibrate --from-runs" in str(info.value)


KVU = LlamaCppLayout(
    n_parallel=4, batch_tokens=2048, kv_unified=True, ubatch_tokens=512, stream_cells=4096
)
PER_SLOT = LlamaCppLayout(
    n_parallel=4, batch_tokens=2048, kv_unified=False, ubatch_tokens=512, stream_cells=1024
)


def joined_prompts() -> list[StreamedRequest]:
    """llama.cpp with checkpoint stops (516, 4): A (300 tokens) arrives at 0 and runs its
    first 296 tokens alone, then its last 4; B (280 tokens) arrives at 0.5, while A's
    296 run, and its first 276 join A's last 4 in the step that gives A's first token
    (1.0); B's last 4 run beside A's first decode (1.05); both decode at 1.10."""
    return [
        StreamedRequest(0.0, 300, 0, [1.0, 1.05, 1.10], [1, 1, 1]),
        StreamedRequest(0.5, 280, 0, [1.05, 1.10], [1, 1]),
    ]


def test_a_prompt_arriving_during_hidden_steps_joins_the_last_of_them():
    steps = rebuild_steps(joined_prompts(), StepRebuild(gap_ms=5.0, prompt_stops=(516, 4)))
    assert steps.prefill_tokens.tolist() == [296 + 4 + 276, 4, 0]
    assert steps.steps.tolist() == [2, 1, 1]  # A's 296 alone, hidden in step 0
    assert steps.decode_seqs.tolist() == [0, 1, 2]
    assert steps.latency_ms.tolist() == pytest.approx([1000.0, 50.0, 50.0])
    assert steps.prefill_attention_cells.tolist() == [0, 0, 0]  # (no layout given)


@pytest.mark.parametrize(
    ("layout", "cells"),
    [
        # -kvu: n_kv = what the buffer holds + the batch so far, padded to 256.
        # step 0, hidden: A's 296 alone, 296 x pad(296) = 296 x 512; then A's 4 (296
        # held) and B's 276 in one ubatch: 280 x pad(296 + 280) = 280 x 768.
        # step 1: A decodes (300 held) and B's 4 (276 held) after it: 4 x pad(576 + 5)
        (KVU, [296 * 512 + 280 * 768, 4 * 768, 0]),
        # per slot: each prompt over its own stream: A's 296 x pad(296), A's 4 x
        # pad(300), B's 276 x pad(276); B's last 4 x pad(280)
        (PER_SLOT, [296 * 512 + 4 * 512 + 276 * 512, 4 * 512, 0]),
    ],
    ids=["kvu", "per-slot"],
)
def test_rebuilt_prompts_count_the_cells_the_engine_model_counts(layout, cells):
    cfg = StepRebuild(gap_ms=5.0, prompt_stops=(516, 4), llamacpp=layout)
    steps = rebuild_steps(joined_prompts(), cfg)
    assert steps.prefill_attention_cells.tolist() == cells
    assert steps.design_matrix()[:, 4].tolist() == cells


def kvu_runs(folder: Path, layout: str = "placed") -> list[Path]:
    """llama.cpp -kvu runs of prompts of 200-700 tokens, priced per cell attended (a fit
    in n_kv units): a prompt beside running requests attends over all their cells
    (*layout*: ``scheduler.kv_layout``)."""
    fit = load_fit(DATA / "synthetic_fit.yaml").model_copy(update={"attention": "n_kv"})
    cells_fit = folder / "fit_cells.yaml"
    write_fit(fit, cells_fit)
    out = []
    for k, (seed, rate) in enumerate([(1, 2.0), (2, 4.0)]):
        raw = runs_raw(seed, rate)
        raw["workload"]["input_tokens"] = {"name": "uniform", "low": 200, "high": 700}
        raw["scheduler"] = {"name": "llamacpp", "n_parallel": 4, "kv_unified": True,
                            "sliding_window": True, "cache_prompt": False,
                            "kv_layout": layout}  # fmt: skip
        raw["cost"]["path"] = str(cells_fit)
        res = simulate(scenario_from_dict(raw))
        assert (res.records["status"] == "ok").all()
        assert res.engine["iterations"] > 0
        out.append(write_run(res, folder / f"kvu{k}"))
    return out


@pytest.mark.parametrize(
    ("layout", "within", "fixed_within"), [("packed", 0.05, 0.2), ("placed", 0.1, 0.3)]
)
def test_a_fit_on_kvu_runs_in_cells_gives_back_the_cells_coefficients(
    tmp_path, layout, within, fixed_within
):
    # placed: the rebuild replays the cells over its own steps, and where it put a
    # prompt's first chunk in an engine step of its own while the engine ran it beside
    # another prompt's chunk, the cells differ from the engine's there (the prompt terms
    # come back within 10 %, the decode terms as exactly)
    runs = kvu_runs(tmp_path, layout)
    scenario_file = tmp_path / "kvu.yaml"
    raw = runs_raw(1, 2.0)
    raw["scheduler"] = {"name": "llamacpp", "n_parallel": 4, "kv_unified": True,
                        "sliding_window": True, "cache_prompt": False,
                        "kv_layout": layout}  # fmt: skip
    scenario_file.write_text(yaml.safe_dump(raw))
    out = tmp_path / "fit.yaml"
    argv = ["calibrate", "--from-runs", *map(str, runs), "--scenario", str(scenario_file)]
    assert main([*argv, "--loss", "soft_l1", "--out", str(out)]) == 0
    fit = load_fit(out)
    assert fit.attention == "n_kv"
    assert fit.runs is not None
    assert fit.runs.rebuild["prompt_stops"] == [516, 4]
    # (no -c: the training context, 32768 cells)
    assert fit.runs.rebuild["llamacpp"] == {
        "n_parallel": 4, "batch_tokens": 2048, "kv_unified": True, "ubatch_tokens": 512,
        "stream_cells": 32768, "kv_layout": layout, "swa_window": 512,
        "swa_layer_share": 5 / 6, "clears_idle_slots": True,
    }  # fmt: skip
    got = fit.coefficients.model_dump()
    assert got["per_decode_seq_ms"] == pytest.approx(TRUE["per_decode_seq_ms"], rel=0.05)
    for term in ("per_prefill_token_ms", "per_prefill_attention_ms"):
        assert got[term] == pytest.approx(TRUE[term], rel=within), term
    # a step's logits (0 here) against its fixed cost: only the few steps with a prompt's
    # first chunk hidden in them (no logits) tell them apart, so the split is loose, and
    # what every step with logits costs is exact
    assert got["fixed_ms"] + got["per_output_pass_ms"] == pytest.approx(TRUE["fixed_ms"], rel=0.01)
    assert got["fixed_ms"] == pytest.approx(TRUE["fixed_ms"], rel=fixed_within)


def test_cells_from_runs_need_a_profile_that_measured_them(tmp_path, capsys):
    runs = kvu_runs(tmp_path)
    scenario_file = tmp_path / "kvu.yaml"
    raw = runs_raw(1, 2.0)
    raw["scheduler"] = {"name": "llamacpp", "n_parallel": 4, "kv_unified": True}
    scenario_file.write_text(yaml.safe_dump(raw))
    prof = str(DATA / "synthetic_profile.csv")  # (no attention_cells column)
    argv = ["calibrate", prof, "--from-runs", str(runs[0]), "--scenario", str(scenario_file)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "synthetic_profile.csv: no attention_cells or attention_computed column" in err
    assert len(err.splitlines()) == 1


def test_rebuild_for_reads_the_scenarios_engine():
    sched = {"name": "llamacpp", "n_parallel": 2, "n_ctx": 4096, "n_batch": 64,
             "sliding_window": True}  # fmt: skip
    llama = scenario_from_dict({**runs_raw(1, 1.0), "scheduler": sched}).scheduler
    got = rebuild_for(llama)
    assert got["prompt_budget"] == 64
    assert got["prompt_stops"] == (64, 4)  # min(n_batch, 4 + n_ubatch), min(n_batch, 4)
    assert got["llamacpp"] == LlamaCppLayout(
        n_parallel=2, batch_tokens=64, kv_unified=False, ubatch_tokens=64, stream_cells=2048,
        kv_layout="placed", swa_window=512, swa_layer_share=5 / 6, clears_idle_slots=False,
    )  # fmt: skip
    chunked = {"name": "chunked_prefill", "max_num_seqs": 8, "max_num_batched_tokens": 256}
    vllm = scenario_from_dict({**runs_raw(1, 1.0), "scheduler": chunked}).scheduler
    assert rebuild_for(vllm) == {"prompt_budget": 256}
    assert rebuild_for(scenario(1, 1.0).scheduler) == {}
    sglang = {"name": "prefill_first", "chunked_prefill_size": 512}
    alone = scenario_from_dict({**runs_raw(1, 1.0), "scheduler": sglang}).scheduler
    assert rebuild_for(alone, 16) == {
        "prompt_budget": 512, "prompts_alone": True, "page_tokens": 16
    }  # fmt: skip
    mixed = scenario_from_dict(
        {**runs_raw(1, 1.0), "scheduler": {**sglang, "enable_mixed_chunk": True}}
    ).scheduler
    assert rebuild_for(mixed, 16) == {"prompt_budget": 512, "page_tokens": 16}  # as vLLM


@pytest.mark.parametrize(
    ("layout", "passes", "checkpoints", "outputs"),
    [
        # per slot: A in slot 3, B in slot 2 (the LRU tie goes to the highest id). Step 0:
        # A's 296 alone (1 pass, no logits), then B's 276 and A's 4 in slot order: 4
        # tokens each from the run {2, 3} (A's last: logits), then B's other 272 alone (2
        # passes). Step 1: A's decode in slot 3, then B's 4 in slot 2 (2 passes: not a
        # run; both with logits). Step 2: both decode, one run.
        (PER_SLOT, [3, 2, 1], [1, 1, 0], [1, 2, 1]),
        # -kvu: one pass per 512 tokens of each engine step; the hidden one no logits
        (KVU, [2, 1, 1], [1, 1, 0], [1, 1, 1]),
    ],
    ids=["per-slot", "kvu"],
)
def test_rebuilt_steps_count_the_passes_of_the_replayed_slots(layout, passes, checkpoints, outputs):
    cfg = StepRebuild(gap_ms=5.0, prompt_stops=(516, 4), llamacpp=layout)
    steps = rebuild_steps(joined_prompts(), cfg)
    assert steps.passes.tolist() == passes
    # a chunk ending within n_ubatch of its prompt's end after earlier tokens of it
    assert steps.checkpoints.tolist() == checkpoints
    assert steps.output_passes.tolist() == outputs
    x = steps.design_matrix()
    assert x.shape[1] == 9
    assert x[:, 5].tolist() == [p - s for p, s in zip(passes, [2, 1, 1], strict=True)]
    assert x[:, 6].tolist() == checkpoints
    assert x[:, 7].tolist() == outputs
    # the first two rebuilt steps carry prompt tokens, the last only decodes (its
    # attention is the decode term's)
    assert x[:, 8].tolist() == steps.prefill_computed_cells.tolist()
    assert x[0, 8] > 0
    assert x[1, 8] > 0
    assert x[2, 8] == 0


def test_replayed_slots_follow_llamacpps_lru_choice_and_wait_in_order():
    def req(sent: float, last: float) -> StreamedRequest:
        return StreamedRequest(sent, 8, 0, [sent + 0.05, last], [1, 1])

    # two slots: r0 takes slot 1 (a tie: the highest id), r1 slot 0; r2 waits for the
    # first release (r0's, at 1.0); at 3.0 both are idle and slot 0 was released first
    requests = [req(0.0, 1.0), req(0.1, 2.0), req(0.5, 2.5), req(3.0, 3.5)]
    assert replay_slots(requests, 2, 0.005) == [1, 0, 1, 0]
    # two requests waiting: the one whose first token came first was launched first, and
    # it takes the slot released first, whichever was sent first (sent together, the
    # server's queue holds them in an order the client cannot see)
    late = StreamedRequest(0.4, 8, 0, [2.2, 2.6], [1, 1])  # sent first, launched second
    early = StreamedRequest(0.41, 8, 0, [1.1, 3.0], [1, 1])
    assert replay_slots([*requests[:2], late, early], 2, 0.005) == [1, 0, 0, 1]
    # four sent together to two idle slots: taken in the order of their first tokens
    wave = [StreamedRequest(0.001 * k, 8, 0, [f, f + 0.5], [1, 1])
            for k, f in enumerate([0.1, 0.9, 0.11, 1.2])]  # fmt: skip
    assert replay_slots(wave, 2, 0.005) == [1, 1, 0, 0]  # 0 and 2, then 1 and 3
    assert replay_slots(wave, 2, 0.0001) == [1, 0, 1, 1]  # one by one: 0 and 1 first


def test_a_fit_on_per_slot_runs_gives_back_the_pass_and_checkpoint_costs(tmp_path):
    # llama.cpp with a KV stream per slot: a step of requests in slots {0, 2} runs two
    # passes, and each charged pass costs 2 ms; each checkpoint 1 ms; each pass that
    # computes logits 4 ms (a decode's, or a prompt's last; not a chunk before it)
    fit = load_fit(DATA / "synthetic_fit.yaml")
    costs = fit.coefficients.model_copy(
        update={"per_extra_pass_ms": 2.0, "per_checkpoint_ms": 1.0, "per_output_pass_ms": 4.0}
    )
    write_fit(fit.model_copy(update={"attention": "n_kv", "coefficients": costs}),
              tmp_path / "fit_slots.yaml")  # fmt: skip
    sched = {"name": "llamacpp", "n_parallel": 4, "n_ctx": 8192, "sliding_window": True,
             "cache_prompt": False}  # fmt: skip
    runs = []
    for k, (seed, rate) in enumerate([(1, 3.0), (2, 6.0)]):
        raw = runs_raw(seed, rate)
        raw["scheduler"] = sched
        raw["cost"]["path"] = str(tmp_path / "fit_slots.yaml")
        res = simulate(scenario_from_dict(raw))
        assert (res.records["status"] == "ok").all()
        runs.append(write_run(res, tmp_path / f"slots{k}"))
    layout = rebuild_for(scenario_from_dict({**runs_raw(1, 1.0), "scheduler": sched}).scheduler)
    steps = steps_of_runs(runs, StepRebuild(**layout))
    assert (steps.passes > steps.steps).mean() > 0.1  # fragmented steps are common
    assert (steps.output_passes != 1).mean() > 0.1  # and steps with none or several logits
    # the rows of each pass of the decode-only steps of several passes (Steps.pass_rows)
    multi = (steps.prefill_seqs == 0) & (steps.passes > 1) & (steps.steps == 1)
    assert multi.any()
    assert (steps.pass_rows[multi].sum(axis=1) == steps.decode_seqs[multi]).all()
    assert ((steps.pass_rows[multi] > 0).sum(axis=1) == steps.passes[multi]).all()
    assert (steps.pass_rows[~multi] == 0).all()
    fitted = fit_runs(runs, rebuild=StepRebuild(**layout), loss="soft_l1")
    got = fitted.coefficients
    # those passes priced as lone steps of their rows count the fixed 5 ms once a pass
    # where these runs paid 2 (the extra pass): the gap is -3 ms a pass beyond one
    assert fitted.decode_pass_gap_ms == pytest.approx(-3.0, abs=0.5)
    want = {**TRUE, "per_extra_pass_ms": 2.0, "per_checkpoint_ms": 1.0, "per_output_pass_ms": 4.0}
    for term in ("fixed_ms", "per_decode_seq_ms", "per_prefill_token_ms", "per_output_pass_ms"):
        assert getattr(got, term) == pytest.approx(want[term], rel=0.05), term
    # a fragmented decode step's extra pass computes logits too (both terms at once): only
    # the prompts' passes without logits part them, so these two are looser
    for term in ("per_extra_pass_ms", "per_checkpoint_ms"):
        assert getattr(got, term) == pytest.approx(want[term], rel=0.4), term


def test_given_rebuild_flags_override_what_the_scenario_implies(runs, tmp_path):
    raw = runs_raw(1, 2.0)
    raw["scheduler"] = {"name": "llamacpp", "n_parallel": 4, "sliding_window": True}
    scenario_file = tmp_path / "llama.yaml"
    scenario_file.write_text(yaml.safe_dump(raw))
    out = tmp_path / "fit.yaml"
    argv = ["calibrate", "--from-runs", str(runs[0][0]), "--scenario", str(scenario_file)]
    assert main([*argv, "--prompt-budget", "64", "--out", str(out)]) == 0
    fitted = load_fit(out).runs
    assert fitted is not None
    rebuild = fitted.rebuild
    assert rebuild["prompt_budget"] == 64  # given
    assert rebuild["prompt_stops"] == [516, 4]  # implied: -ub 512 and 4 before the end
    assert rebuild["llamacpp"]["n_parallel"] == 4


def sglang_runs(folder: Path, mixed: bool = False) -> list[Path]:
    """Prompts of 300-900 tokens under SGLang's prefill-first scheduler with a 256-token
    chunk budget, at two loads, written as a replay writes them."""
    runs = []
    for k, (seed, rate) in enumerate([(1, 3.0), (2, 6.0)]):
        raw = runs_raw(seed, rate)
        raw["workload"]["input_tokens"] = {"name": "uniform", "low": 300, "high": 900}
        raw["scheduler"] = {
            "name": "prefill_first", "chunked_prefill_size": 256, "enable_mixed_chunk": mixed
        }  # fmt: skip
        res = simulate(scenario_from_dict(raw))
        assert (res.records["status"] == "ok").all()
        runs.append(write_run(res, folder / f"s{k}"))
    return runs


def test_prompts_alone_recover_the_coefficients_of_sglang_runs(tmp_path):
    # SGLang computes a prompt's chunks in prefill-only steps back to back, the decodes
    # waiting: placed beside the decodes (vLLM's rule) the fit is 16 % off per prompt
    # token, 36 % with no budget; as the engine ran them, within 2 %
    runs = sglang_runs(tmp_path)
    naive = fit_runs(runs, loss="soft_l1").coefficients.model_dump()
    beside = fit_runs(runs, rebuild=StepRebuild(prompt_budget=256), loss="soft_l1")
    sched = scenario_from_dict({**runs_raw(1, 1.0), "scheduler": {
        "name": "prefill_first", "chunked_prefill_size": 256}}).scheduler  # fmt: skip
    alone = fit_runs(runs, rebuild=StepRebuild(**rebuild_for(sched, 16)), loss="soft_l1")
    token = TRUE["per_prefill_token_ms"]
    assert naive["per_prefill_token_ms"] / token - 1 > 0.2
    assert beside.coefficients.per_prefill_token_ms / token - 1 > 0.1
    got = alone.coefficients.model_dump()
    for term in TERMS:
        assert got[term] == pytest.approx(TRUE[term], rel=0.02), term


def test_mixed_chunk_runs_are_rebuilt_as_vllms(tmp_path):
    # --enable-mixed-chunk puts the decodes in the prefill steps, taking from the budget,
    # as vLLM does; but a new prompt starts with whole pages (15 % off per prompt token
    # when its first chunk is read as the whole room)
    runs = sglang_runs(tmp_path, mixed=True)
    sched = scenario_from_dict({**runs_raw(1, 1.0), "scheduler": {
        "name": "prefill_first", "chunked_prefill_size": 256, "enable_mixed_chunk": True}}
    ).scheduler  # fmt: skip
    unpaged = fit_runs(runs, rebuild=StepRebuild(prompt_budget=256), loss="soft_l1")
    assert unpaged.coefficients.per_prefill_token_ms / TRUE["per_prefill_token_ms"] < 0.9
    got = fit_runs(runs, rebuild=StepRebuild(**rebuild_for(sched, 16)), loss="soft_l1")
    for term in TERMS:
        assert got.coefficients.model_dump()[term] == pytest.approx(TRUE[term], rel=0.02), term


def alone_stream() -> list[StreamedRequest]:
    """SGLang, prompts alone, a 256-token chunk budget, pages of 16 tokens. A (600
    tokens, sent at 0) runs 256 and 256 alone (to 0.010 and 0.020), then its last 88 with
    B (100, sent at 0.012) whole and the first 48 of C (500, sent at 0.015): the budget
    less 96 + 112 paged. A's and B's first tokens at 0.030. C continues alone with 256
    and its last 196: first token at 0.050. A, B and C decode at 0.060; D (16, sent at
    0.055) is computed in a prefill step of its own, 4 ms after that decode (close enough
    to join it, were prompts not alone), and decodes at 0.074."""
    return [
        StreamedRequest(0.0, 600, 0, [0.030, 0.060], [1, 1]),
        StreamedRequest(0.012, 100, 0, [0.030, 0.060], [1, 1]),
        StreamedRequest(0.015, 500, 0, [0.050, 0.060], [1, 1]),
        StreamedRequest(0.055, 16, 0, [0.064, 0.074], [1, 1]),
    ]


def test_prompts_alone_are_placed_as_sglang_runs_them():
    cfg = StepRebuild(prompt_budget=256, prompts_alone=True, page_tokens=16)
    steps = rebuild_steps(alone_stream(), cfg)
    # step 0 began at A's send (B and C joined its last engine step): 30 ms, 3 engine steps
    assert steps.latency_ms.tolist() == pytest.approx([30.0, 20.0, 10.0, 4.0, 10.0])
    assert steps.steps.tolist() == [3, 2, 1, 1, 1]
    assert steps.prefill_tokens.tolist() == [600 + 100 + 48, 256 + 196, 0, 16, 0]
    assert steps.decode_seqs.tolist() == [0, 0, 3, 0, 1]
    assert steps.decode_context_tokens.tolist() == [0, 0, 601 + 101 + 501, 0, 17]
    assert steps.prefill_attention_tokens.tolist() == [
        256 * 256 + 256 * 512 + 88 * 600 + 100 * 100 + 48 * 48,
        256 * 304 + 196 * 500,
        0,
        16 * 16,
        0,
    ]
    # beside the decodes (the default), D's prompt is read as part of the decode step
    beside = rebuild_steps(alone_stream(), StepRebuild(prompt_budget=256))
    assert beside.decode_seqs.tolist()[-2:] == [3, 1]
    assert beside.prefill_tokens.tolist()[-2:] == [16, 0]


def test_prompts_alone_from_the_command_line(tmp_path, capsys):
    runs = sglang_runs(tmp_path)
    out = tmp_path / "fit.yaml"
    args = ["calibrate", "--from-runs", *map(str, runs), "--loss", "soft_l1"]
    assert main([*args, "--prompt-budget", "256", "--prompts-alone", "--out", str(out)]) == 0
    flags = load_fit(out).coefficients.per_prefill_token_ms
    scen = tmp_path / "sglang.yaml"
    raw = runs_raw(1, 1.0)
    raw["scheduler"] = {"name": "prefill_first", "chunked_prefill_size": 256}
    scen.write_text(yaml.safe_dump(raw))
    assert main([*args, "--scenario", str(scen), "--out", str(out)]) == 0
    implied = load_fit(out).coefficients.per_prefill_token_ms
    # pages of 1 (SGLang's default) against the scenario's 16: first chunks differ a little
    assert flags == pytest.approx(TRUE["per_prefill_token_ms"], rel=0.05)
    assert implied == pytest.approx(TRUE["per_prefill_token_ms"], rel=0.02)
    capsys.readouterr()


def split_first_chunks(folder: Path, late_s: float, count: int) -> int:
    """Delay by *late_s* the first chunk of up to *count* prompts of over 200 tokens that
    ended a step beside at least two other requests' chunks (the step then splits in two
    at the rebuild: the decodes, and a part of *late_s* holding the prompt); how many."""
    path = folder / "tokens.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    sent = {
        r["request_id"]: r
        for r in map(json.loads, (folder / "requests.jsonl").read_text().splitlines())
    }
    times = np.sort([t for x in lines for t in x["chunk_s"]])
    done = 0
    for x in lines:
        t0 = x["chunk_s"][0]
        beside = int(np.sum(np.abs(times - t0) < 1e-9))
        later = times[times > t0 + 1e-9]
        if (
            done < count
            and beside >= 3
            and len(later)
            and later[0] - t0 > 2.5 * late_s
            and sent[x["request_id"]]["input_tokens"] > 200
        ):
            x["chunk_s"][0] = t0 + late_s
            done += 1
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return done


def test_default_loss_holds_the_prompt_terms_where_split_steps_move_soft_l1(runs, tmp_path):
    # three prompt steps whose first token came 3 ms after the step's decode tokens: each
    # splits into the decodes' step and a 3 ms step holding the prompt (calibration.md §7)
    folder = write_run(runs[0][1], tmp_path / "split")
    assert split_first_chunks(folder, 0.003, 3) == 3
    steps = steps_of_runs([folder], StepRebuild())
    whole = steps_of_runs([runs[0][0]], StepRebuild())
    assert len(steps) == len(whole) + 3
    assert np.sum((steps.latency_ms < 3.5) & (steps.prefill_tokens > 200)) == 3
    default, relative = fit_runs([folder]), fit_runs([folder], loss="soft_l1")
    assert default.method == "soft_l1_log_ratio"

    def off(fit: Any, term: str) -> float:
        return abs(fit.coefficients.model_dump()[term] / TRUE[term] - 1)

    prompt_terms = ("per_prefill_token_ms", "per_prefill_attention_ms")
    assert max(off(default, t) for t in prompt_terms) < 0.03
    assert max(off(relative, t) for t in prompt_terms) > 0.25
    assert max(off(default, t) for t in TERMS) < 0.03


def test_runs_with_the_hosts_wander_give_it_back(tmp_path, capsys):
    # the simulator's own runs under a drift of sigma 0.08 over 2 s: the fit keeps the
    # typical step's coefficients and reads the drift back from the steps
    wander = {"sigma": 0.08, "seconds": 2.0}
    runs = []
    for k, rate in enumerate([6.0, 10.0, 8.0]):
        raw = runs_raw(k + 1, rate, 600)
        raw["cost"]["jitter"] = {"wander": wander}
        res = simulate(scenario_from_dict(raw))
        runs.append(write_run(res, tmp_path / f"w{k}"))
    fit = fit_runs(runs)
    got = fit.coefficients.model_dump()
    for term in ("fixed_ms", "per_decode_seq_ms"):
        assert got[term] == pytest.approx(TRUE[term], rel=0.1), term
    found = fit.noise.wander
    assert found is not None
    assert found.sigma == pytest.approx(0.08, rel=0.25)
    assert found.seconds == pytest.approx(2.0, rel=0.5)
    from lyra_simpy.calibration.fitfile import write_fit

    path = tmp_path / "fit.yaml"
    write_fit(fit, path)
    assert load_fit(path).noise.wander == found  # kept in the fit file
    assert main(["calibrate", "--from-runs", *map(str, runs), "--out", str(tmp_path / "f")]) == 0
    assert "the host's wander (cost.jitter.wander: fitted): sigma 0.0" in capsys.readouterr().out
    # and a scenario on that fit draws it
    raw = runs_raw(9, 1.0, 50)
    raw["cost"] = {"name": "profile", "path": str(path), "jitter": {"wander": "fitted"}}
    assert simulate(scenario_from_dict(raw)).summary["completed"] == 50
