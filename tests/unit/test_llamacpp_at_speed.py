"""validation/llamacpp_at_speed.py: Table 1 at the host's speed during each load, an
attribution of the matrix's misses (every step cost times the load's real ÷ charged
decode step)."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from builders import validation_module
from lyra_simpy.calibration.fit import predict_ms
from lyra_simpy.calibration.fitfile import load_fit
from lyra_simpy.calibration.profiles import read_profile
from lyra_simpy.cli import main as cli_main
from lyra_simpy.scenario import load_scenario

AT_SPEED = validation_module("llamacpp_at_speed")
ROOT = Path(__file__).resolve().parents[2]


def test_a_load_at_another_speed_is_its_scenario_at_cost_speed():
    # every step cost through cost.speed (the fit's terms, decode residuals and wake:
    # tests/unit/test_profile_speed.py), the request path in the workload
    raw = {"cost": {"name": "profile", "path": "fit.yaml", "wake": "fitted"},
           "workload": {"request_path_ms": 5.0, "request_path_cpu_share": 1.0}}  # fmt: skip
    moved = AT_SPEED.at_speed_scenario(raw, 2.0)
    assert moved == {
        "cost": {"name": "profile", "path": "fit.yaml", "wake": "fitted", "speed": 2.0},
        "workload": {"request_path_ms": 10.0, "request_path_cpu_share": 1.0},
    }
    assert "speed" not in raw["cost"]  # (the input is left as it was)
    without_path = {"cost": {"name": "profile"}, "workload": {"request_path_ms": 0.0}}
    assert AT_SPEED.at_speed_scenario(without_path, 1.1)["workload"]["request_path_ms"] == 0.0


def test_a_point_is_priced_by_its_own_fit_wherever_its_folder_lies(tmp_path):
    # item 43: the stored scenarios name the fit where the point ran (a worktree); a point
    # read from another checkout is priced by the fit in its own folder
    raw = {"cost": {"name": "profile", "path": "/elsewhere/fit_probes.yaml"}, "workload": {}}
    moved = AT_SPEED.at_speed_scenario(raw, 1.1, tmp_path / "fit_probes.yaml")
    assert moved["cost"] == {"name": "profile", "path": str(tmp_path / "fit_probes.yaml"),
                             "speed": 1.1}  # fmt: skip
    assert AT_SPEED.at_speed_scenario(raw, 1.1)["cost"]["path"] == "/elsewhere/fit_probes.yaml"
    # --resimulate: Table 1 again priced by the fit it has just made (before, an ablation
    # such as --decode-step mean priced the fit the stored scenario named, without a word)
    tables = validation_module("llamacpp_tables")
    stored = {"cost": {"name": "profile", "path": "/elsewhere/fit_probes.yaml", "wake": "fitted"},
              "workload": {"request_path_ms": 4.0, "request_path_cpu_share": 1.0}}  # fmt: skip
    again = tables.table1_again(stored, tmp_path / "fit_probes.yaml", 0.0, wake=False)
    assert again["cost"] == {"name": "profile", "path": str(tmp_path / "fit_probes.yaml")}
    assert again["workload"] == {"request_path_ms": 4.0, "request_path_cpu_share": 0.0}
    assert tables.table1_again(stored, tmp_path / "f.yaml", 1.0, wake=True)["cost"]["wake"] == (
        "fitted"
    )
    assert stored["cost"]["path"] == "/elsewhere/fit_probes.yaml"  # (the input as it was)
    # item 48: --kv-layout packed, the ablation; without it the scheduler's default
    llama = {**stored, "scheduler": {"name": "llamacpp", "kv_layout": "packed"}}
    assert (
        "kv_layout" not in tables.table1_again(llama, tmp_path / "f.yaml", 1.0, False)["scheduler"]
    )
    packed = tables.table1_again(stored, tmp_path / "f.yaml", 1.0, False, "packed")
    assert "scheduler" not in packed  # (a stored scenario always has one; this has none)
    packed = tables.table1_again(llama, tmp_path / "f.yaml", 1.0, False, "packed")
    assert packed["scheduler"] == {"name": "llamacpp", "kv_layout": "packed"}
    no_path = {"cost": {"name": "profile"}, "workload": {"request_path_ms": 0.0}}
    assert tables.table1_again(no_path, tmp_path / "f.yaml", 1.0, wake=False)["workload"] == {
        "request_path_ms": 0.0, "request_path_cpu_share": 0.0}  # fmt: skip


def test_a_load_at_a_speed_per_phase_prices_its_prompt_steps_at_their_own():
    # item 70: --ratio phase and one-run-phase, cost.prompt_speed beside cost.speed
    raw = {"cost": {"name": "profile", "path": "fit.yaml"}, "workload": {"request_path_ms": 5.0}}
    moved = AT_SPEED.at_speed_scenario(raw, 0.9, None, 1.02)
    assert moved["cost"] == {"name": "profile", "path": "fit.yaml", "speed": 0.9,
                             "prompt_speed": 1.02}  # fmt: skip
    assert moved["workload"]["request_path_ms"] == 4.5  # (the path at the decode speed)
    with pytest.raises(ValueError, match=r"prompt: got 0.0, must be a positive number"):
        AT_SPEED.at_speed_scenario(raw, 0.9, None, 0.0)
    charge = {
        "decode": {"median": 0.87, "mean": 0.9},
        "prompt": {"median": 1.01, "mean": 1.05},
    }
    other = {"decode": {"median": 1.1, "mean": 1.2}, "prompt": {"median": 1.3, "mean": 1.4}}
    res = {"loads": {AT_SPEED.FIT_LOAD: {"steps_vs_charge": charge},
                     "closed_8": {"steps_vs_charge": other}}}  # fmt: skip
    phase, one_run = AT_SPEED.RATIOS["phase"], AT_SPEED.RATIOS["one-run-phase"]
    assert (phase.read(res, "closed_8"), phase.prompt(res, "closed_8")) == (1.1, 1.3)
    assert (one_run.read(res, "closed_8"), one_run.prompt(res, "closed_8")) == (0.9, 1.05)
    assert AT_SPEED.RATIOS["runs"].prompt is None  # (the others: one speed for every step)
    # speed-phase: both read before each run, `lyra-simpy speed --batch NP` and --prompt N
    machine = [{"speed_batch": 0.9, "speed_prompt": 1.1}, {"speed_batch": 1.0, "speed_prompt": 1.2}]
    before = {"loads": {"closed_8": {"machine": machine}}}
    both = AT_SPEED.RATIOS["speed-phase"]
    assert (both.read(before, "closed_8"), both.prompt(before, "closed_8")) == (
        pytest.approx(0.95),
        pytest.approx(1.15),
    )
    older = {"loads": {"closed_8": {"machine": [{"speed_batch": 0.9}]}}}  # (before item 70)
    with pytest.raises(SystemExit, match=r"closed_8 has no `lyra-simpy speed --prompt` reading"):
        both.prompt(older, "closed_8")
    # speed-beside: the prompt read beside the full batch's other decoders (item 75); a run
    # whose reading failed (None) is left out of the load's mean
    machine[0]["speed_beside"], machine[1]["speed_beside"] = 1.04, None
    beside = AT_SPEED.RATIOS["speed-beside"]
    assert (beside.read(before, "closed_8"), beside.prompt(before, "closed_8")) == (
        pytest.approx(0.95),
        pytest.approx(1.04),
    )
    with pytest.raises(SystemExit, match=r"closed_8 has no `lyra-simpy speed --prompt N --beside"):
        beside.prompt(older, "closed_8")
    # speed-lone-beside: that prompt reading with the lone decode reading (item 77)
    machine[0]["speed_lone"], machine[1]["speed_lone"] = 1.1, 1.3
    lone = AT_SPEED.RATIOS["speed-lone-beside"]
    assert (lone.read(before, "closed_8"), lone.prompt(before, "closed_8")) == (
        pytest.approx(1.2),
        pytest.approx(1.04),
    )
    assert lone.field == "speed_lone"
    # how far a prompt speed lay from the runs' prompt steps, point by point: the mean and
    # the standard deviation over its loads of the log of the one over the other
    stored = {"default/long": {"loads": {
        "closed_4": {"steps_vs_charge": {"prompt": {"median": 1.0}}},
        "closed_8": {"steps_vs_charge": {"prompt": {"median": 1.2}}}}}}  # fmt: skip
    priced = {"default/long": {"closed_4": {"prompt_ratio": 1.1},
                               "closed_8": {"prompt_ratio": 1.2}}}  # fmt: skip
    bias, spread = AT_SPEED.prompt_against_runs(priced, stored)["default/long"]
    assert bias == pytest.approx(np.log(1.1) / 2)
    assert spread == pytest.approx(np.log(1.1) / 2)
    got = {"in_target": 6, "missed": ["p90_ttft_ms"], "p50_errors": [0.05]}
    loads = {"closed_8": {"ratio": 1.1, "prompt_ratio": 1.3, "table1": got, "at_speed": got}}
    assert AT_SPEED.report({"default/long": loads}, "phase")[2] == (
        "| default/long | 1.10/1.30 | 6 / 7 | 5 % | 6 / 7 | 5 % |"
    )


def test_a_ratio_that_is_not_a_speed_is_refused():
    raw = {"cost": {}, "workload": {}}
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"ratio: got .*, must be a positive number"):
            AT_SPEED.at_speed_scenario(raw, bad)


def _table(errors: dict[str, tuple[float, float]]) -> list[dict]:
    return [{"metric": m, "error": e, "spread": s} for m, (e, s) in errors.items()]


def test_cells_and_report_count_as_the_matrix_does():
    table = _table({
        "output_throughput": (0.04, 0.0),  # in: within 5 %
        "median_ttft_ms": (-0.15, 0.2),  # in: within the spread (wider than 10 %)
        "median_tpot_ms": (0.12, 0.05),  # out
        "median_e2el_ms": (-0.08, 0.01),  # in: within 10 %
        "p90_ttft_ms": (0.03, 0.02),  # out: a p90 only within the spread
        "p90_tpot_ms": (-0.02, 0.02),  # in
        "p90_e2el_ms": (0.0, 0.0),  # in
        "p99_tpot_ms": (0.5, 0.0),  # not one of the matrix's cells
    })  # fmt: skip
    got = AT_SPEED.cells(table)
    assert got == {"in_target": 5, "missed": ["median_tpot_ms", "p90_ttft_ms"],
                   "p50_errors": [0.15, 0.12, 0.08]}  # fmt: skip
    loads = {"poisson_0.3": {"ratio": 1.08, "table1": got, "at_speed": {**got, "in_target": 7}},
             "closed_4": {"ratio": 0.95, "table1": got, "at_speed": got}}  # fmt: skip
    lines = AT_SPEED.report({"default/short": loads})
    assert lines[2] == "| default/short | 1.08, 0.95 | 10 / 14 | 12 % | 12 / 14 | 12 % |"
    assert lines[3] == "| all | | 10 / 14 | | 12 / 14 | |"


def test_the_speeds_a_load_is_priced_at():
    machine = [{"step_before": 14.0}, {"step_before": 13.0}, {"step_before": 15.0}]
    res = {"gate": {"run_ref_ms": 12.5},
           "loads": {"closed_4": {"machine": machine, "steps_vs_charge": {
               "decode": {"median": 1.18, "mean": 1.23}}}}}  # fmt: skip
    assert AT_SPEED.runs_ratio(res, "closed_4") == 1.18
    assert AT_SPEED.runs_mean_ratio(res, "closed_4") == 1.23  # (--ratio mean: the skew)
    assert set(AT_SPEED.RATIOS) == {
        "runs", "mean", "gate", "gate-all", "batch", "batch-mean", "speed", "speed-batch",
        "one-run", "phase", "one-run-phase", "speed-phase", "speed-beside",
        "speed-lone-beside", "speed-beside-fit", "speed-beside-rows",
        "speed-beside-median"}  # fmt: skip
    assert AT_SPEED.RATIOS["mean"].read is AT_SPEED.runs_mean_ratio
    # --ratio one-run: every load at the mean step of the load Tables 2 and 3 fit on
    res["loads"]["poisson_0.6"] = {"steps_vs_charge": {"decode": {"median": 1.0, "mean": 1.04}}}
    assert AT_SPEED.one_run_ratio(res, "closed_4") == AT_SPEED.one_run_ratio(res, "x") == 1.04
    assert AT_SPEED.gate_ratio(res, "closed_4") == pytest.approx(14.0 / 12.5)
    # --ratio gate-all: every reading the gate took before each run, their median (item 40)
    with pytest.raises(SystemExit, match="closed_4 has no gate readings for --ratio gate-all"):
        AT_SPEED.gate_all_ratio(res, "closed_4")
    machine[0]["gate_readings"] = [11.0, 11.5, 14.0]  # waited twice: the host was quicker
    machine[1]["gate_readings"] = [13.0]
    assert AT_SPEED.gate_all_ratio(res, "closed_4") == pytest.approx((11.5 + 13.0) / 2 / 12.5)
    res["gate"] = {}  # a profile taken without --speed-reference: no step to hold the runs to
    with pytest.raises(
        SystemExit, match="closed_4 has no speed reference or gate probes for --ratio gate"
    ):
        AT_SPEED.gate_ratio(res, "closed_4")
    # --batch-before: the full batch's step right before each run over the profile's row
    with pytest.raises(
        SystemExit, match="closed_4 has no full-batch step before its runs for --ratio batch"
    ):
        AT_SPEED.batch_ratio(res, "closed_4")
    res["gate"] = {"batch_row_ms": 40.0}
    for m, b in zip(machine, (44.0, 42.0, None), strict=True):
        m["batch_before"] = b  # (a check that answered nothing is left out)
    assert AT_SPEED.batch_ratio(res, "closed_4") == pytest.approx(43.0 / 40.0)
    # --ratio batch-mean: the same check's mean step (item 40); points run before it lack it
    with pytest.raises(SystemExit, match="closed_4 has no full-batch mean step before its runs"):
        AT_SPEED.batch_mean_ratio(res, "closed_4")
    for m, b in zip(machine, (46.0, None, 44.0), strict=True):
        m["batch_before_mean"] = b
    assert AT_SPEED.batch_mean_ratio(res, "closed_4") == pytest.approx(45.0 / 40.0)
    # --ratio speed, speed-batch: what `lyra-simpy speed` printed before each run (item 42),
    # already over the profile; a reading that failed (None) is left out
    with pytest.raises(SystemExit, match="closed_4 has no `lyra-simpy speed` reading before "
                       "its runs for --ratio speed-batch"):  # fmt: skip
        AT_SPEED.speed_batch_ratio(res, "closed_4")
    for m, lone, batch in zip(machine, (1.02, 1.10, None), (1.05, None, 1.07), strict=True):
        m["speed_lone"], m["speed_batch"] = lone, batch
    assert AT_SPEED.speed_ratio(res, "closed_4") == pytest.approx(1.06)
    assert AT_SPEED.speed_batch_ratio(res, "closed_4") == pytest.approx(1.06)
    assert AT_SPEED.RATIOS["speed-batch"].read is AT_SPEED.speed_batch_ratio
    # against the runs' mean step: the log of each load's ratio over it, mean and spread
    res["loads"]["closed_4"]["steps_vs_charge"]["decode"]["mean"] = 1.0
    res["loads"]["poisson_0.6"]["steps_vs_charge"]["decode"]["mean"] = 1.0
    bias, spread = AT_SPEED.against_mean(
        {"p": {"closed_4": {"ratio": 1.1}, "poisson_0.6": {"ratio": 1 / 1.1}}}, {"p": res}
    )
    assert bias == pytest.approx(0.0, abs=1e-12)
    assert spread == pytest.approx(np.log(1.1))


def test_a_run_priced_at_the_median_of_every_reading_so_far():
    # item 83: each run at the median of the point's readings up to the one right before
    # it, the loads in the matrix's order; a load's ratio is the mean over its runs; a
    # reading that failed adds nothing, and each run's own median is one reading
    loads = {load: {"machine": [{"speed_batch": 1.0 + i / 10 + k / 100} for k in (1, 2, 3)]}
             for i, load in enumerate(AT_SPEED.LOADS)}  # fmt: skip
    res = {"loads": loads}
    first = AT_SPEED.speed_batch_median_ratio(res, "poisson_0.3")
    assert first == pytest.approx(np.mean([1.01, np.median([1.01, 1.02]), 1.02]))
    seen = [1.0 + i / 10 + k / 100 for i in range(2) for k in (1, 2, 3)]
    want = np.mean([np.median(seen[:4]), np.median(seen[:5]), np.median(seen)])
    assert AT_SPEED.speed_batch_median_ratio(res, "poisson_0.6") == pytest.approx(want)
    # against each run's own reading: the level so far pulls a rising host's reading back
    median, last = (AT_SPEED.speed_batch_median_ratio(res, "closed_8"),
                    AT_SPEED.speed_batch_ratio(res, "closed_8"))  # fmt: skip
    assert median < last
    loads["poisson_0.9"]["machine"] = [{"speed_batch": None}, {"speed_batch": [3.0, 1.0, 2.0]}]
    seen = [*seen, 2.0]
    want = np.mean([np.median(seen[:-1]), np.median(seen)])
    assert AT_SPEED.speed_batch_median_ratio(res, "poisson_0.9") == pytest.approx(want)
    with pytest.raises(SystemExit, match=re.escape(
            "poisson_0.3 has no `lyra-simpy speed --prompt N --beside B` reading before its "
            "runs for --ratio speed-beside-median")):  # fmt: skip
        AT_SPEED.speed_beside_median_ratio(res, "poisson_0.3")
    got = AT_SPEED.RATIOS["speed-beside-median"]
    assert got.read is AT_SPEED.speed_batch_median_ratio
    assert got.prompt is AT_SPEED.speed_beside_median_ratio
    assert got.field == "speed_batch"


def test_the_readings_own_spread_within_a_load():
    # item 43: how far the reading before each run strays between one load's runs (the
    # pooled log sd), a reading that failed left out, a load with one reading adding nothing
    up = np.log(1.05)
    loads = {
        "closed_4": {"machine": [{"speed_batch": 1.0}, {"speed_batch": 1.05 ** 2},
                                 {"speed_batch": None}]},
        "closed_8": {"machine": [{"speed_batch": 2.0}, {"speed_batch": 2.0 * 1.05 ** 2}]},
        "poisson_0.3": {"machine": [{"speed_batch": 3.0}, {}]},
    }  # fmt: skip
    noise, n = AT_SPEED.readings_spread({"p": {"loads": loads}}, ["p"], "speed_batch")
    assert n == 4
    assert noise == pytest.approx(np.sqrt(4 * up**2 / 2))  # each load ±ln 1.05 about its mean
    # the gate's readings: each run's median first, as the ratio reads them
    gate = {"closed_4": {"machine": [{"gate_readings": [1.0, 9.0, 1.0]},
                                     {"gate_readings": [1.0]}]}}  # fmt: skip
    assert AT_SPEED.readings_spread({"p": {"loads": gate}}, ["p"], "gate_readings") == (0.0, 2)
    assert AT_SPEED.RATIOS["speed-batch"].field == "speed_batch"
    assert AT_SPEED.RATIOS["mean"].field is None  # (read from the runs themselves)


def test_the_reading_after_each_run_is_the_next_runs_in_the_matrixs_order():
    # item 43: loads in the matrix's order, each's runs one after another; the point's
    # last run has no reading after it
    loads = {load: {"machine": [{"speed_batch": 10 * i + k} for k in (1, 2, 3)],
                    "steps_vs_charge": {"decode": {"mean": 1.0 + i / 100}}}
             for i, load in enumerate(AT_SPEED.LOADS)}  # fmt: skip
    res = {"loads": loads}
    after = AT_SPEED.read_after(res, "speed_batch")
    got = [[m["speed_batch"] for m in after["loads"][load]["machine"]] for load in AT_SPEED.LOADS]
    assert got == [[2, 3, 11], [12, 13, 21], [22, 23, 31], [32, 33, 41], [42, 43, None]]
    assert loads["poisson_0.3"]["machine"][0]["speed_batch"] == 1  # (the input as it was)
    assert AT_SPEED.speed_batch_ratio(after, "closed_8") == pytest.approx(42.5)  # (None out)
    # each load's mean step about its point's own level: the log's sd over the loads
    levels = np.log([1.0 + i / 100 for i in range(5)])
    assert AT_SPEED.point_level({"p": res}, ["p"]) == pytest.approx(np.std(levels))
    flat = {"loads": {load: {"steps_vs_charge": {"decode": {"mean": 1.07}}}
                      for load in AT_SPEED.LOADS}}  # fmt: skip
    assert AT_SPEED.point_level({"p": res, "q": flat}, ["q"]) == pytest.approx(0.0, abs=1e-12)


def test_a_point_without_the_speed_is_named_before_anything_runs(tmp_path, monkeypatch):
    # item 42's pass left -np 2 -b 64 long without `lyra-simpy speed` readings: the script
    # names the point (not only its load) before it simulates any, and --only is the way
    machine = [{"speed_lone": 1.02}, {"speed_lone": 1.04}, {"speed_lone": 1.0}]
    results = {
        "default/short": {"loads": {key: {"machine": machine} for key in AT_SPEED.LOADS}},
        "np2_b64/long": {"loads": {key: {"machine": [{}]} for key in AT_SPEED.LOADS}},
    }
    (tmp_path / "matrix.json").write_text(json.dumps({"facts": {"repeats": 3}, "results": results}))
    for key in results:  # a point with its profile and real runs (llamacpp_points.runs_here)
        (tmp_path / key.replace("/", "_") / "real").mkdir(parents=True)
        (tmp_path / key.replace("/", "_") / "profile.csv").write_text("")
    monkeypatch.setattr(AT_SPEED, "OUT", tmp_path)
    with pytest.raises(SystemExit, match=r"^np2_b64/long: poisson_0.3 has no `lyra-simpy speed` "
                       r"reading .*; --only takes the points that have it$"):  # fmt: skip
        AT_SPEED.main(["--ratio", "speed"])
    assert not list((tmp_path / "default_short").glob("at_speed_*"))  # nothing simulated


def test_a_points_scenarios_name_their_fit_beside_them(tmp_path):
    # item 43's review: the matrix wrote the fit's absolute path into every scenario, so a
    # point's folder copied elsewhere was priced by the old place's fit; the scenario now
    # names it by its file name, read from the scenario's own folder
    points = validation_module("llamacpp_points")
    ran = tmp_path / "ran"
    ran.mkdir()
    shutil.copyfile(ROOT / "tests" / "data" / "synthetic_fit.yaml", ran / "fit_probes.yaml")
    raw = points.scenario("closed_4", points.CONFIGS["default"], points.REGIMES["short"], True,
                          str(ran / "fit_probes.yaml"), "closed_4", None)  # fmt: skip
    assert raw["cost"]["path"] == "fit_probes.yaml"
    raw["cost"]["decode_table"] = False  # (the synthetic fit has no decode residuals)
    (ran / "closed_4.yaml").write_text(yaml.safe_dump(raw))
    moved = tmp_path / "moved"
    shutil.copytree(ran, moved)
    shutil.rmtree(ran)  # (the place it ran is gone: the copy must not need it)
    scenario = load_scenario(moved / "closed_4.yaml")
    assert scenario.base_dir / scenario.cost.path == moved.resolve() / "fit_probes.yaml"
    # and it runs there, priced by the fit beside it
    out = tmp_path / "sim"
    assert cli_main(["run", str(moved / "closed_4.yaml"), "--out", str(out), "--no-figures"]) == 0
    assert list(out.rglob("summary.json"))


def test_a_beside_reading_against_the_fits_price_of_its_rows(tmp_path: Path) -> None:
    # --ratio speed-beside-fit (item 77): -np 4 short's kept profile, fit and first beside
    # reading; its 64-token prompts beside 3 decoders sat 7 % above the fit's price of them
    # (item 75's profile, fit and reading, kept apart since item 78 ran the point again)
    validation = Path(__file__).parents[2] / "docs" / "validation"
    shutil.copytree(validation / "llamacpp-default-short-item75", tmp_path / "default_short")
    here = tmp_path / "default_short"
    got = AT_SPEED.beside_rows_over_fit(here)
    assert round(got, 3) == 1.071
    # by hand: the rows of 64 tokens beside 3, summed by the decoders' context, the median
    # over the contexts against the fit's prediction of the same rows
    profile = read_profile(here / "profile.csv")
    fitted = predict_ms(load_fit(here / "fit_probes.yaml"), profile)
    with (here / "profile.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    shape = ("mixed", "3", "64")  # (the phase, the decoders beside, the prompt's tokens)
    mine = [(int(r["context_len"]), float(r["latency_ms"]), f)
            for r, f in zip(rows, fitted, strict=True)
            if (r["phase"], r["batch_size"], r["prompt_tokens"]) == shape]  # fmt: skip
    contexts = sorted({c for c, _, _ in mine})
    assert len(contexts) > 1
    measured = np.median([sum(m for c2, m, _ in mine if c2 == c) for c in contexts])
    charged = np.median([sum(f for c2, _, f in mine if c2 == c) for c in contexts])
    assert got == pytest.approx(measured / charged)
    # the kept outputs: every load's prompt speed is the beside reading's times the point's
    # factor
    fit = json.loads((validation / "llamacpp-at-speed-beside-fit-item77.json").read_text())
    rows_ = json.loads((validation / "llamacpp-at-speed-beside-item77.json").read_text())
    loads = fit["points"]["default/short"]
    assert [v["prompt_ratio"] for v in loads.values()] == pytest.approx(
        [rows_["points"]["default/short"][k]["prompt_ratio"] * got for k in loads], abs=1e-4
    )
    # a reading taken against the profile's own beside reference (item 78) is priced
    # against what it read: the factor moves with the reference, the fit's price the same
    first = here / "speed" / "poisson_0.3" / "run1-beside.json"
    reading = json.loads(first.read_text())
    first.write_text(json.dumps({**reading, "profile_ms": 1.1 * reading["profile_ms"],
                                 "against": "beside reference"}))  # fmt: skip
    assert AT_SPEED.beside_rows_over_fit(here) == pytest.approx(1.1 * got)
    (here / "speed" / "poisson_0.3" / "run1-beside.json").unlink()
    with pytest.raises(SystemExit, match=r"default_short: no beside reading kept under speed/"):
        AT_SPEED.beside_rows_over_fit(here)


def test_a_beside_reading_against_the_profiles_rows(tmp_path: Path) -> None:
    # --ratio speed-beside-rows (item 81): the reading's yardstick over the pair's rows as
    # the profile measured them. Item 75's -np 4 short reading was taken against those
    # rows (the median over the decoders' contexts of each context's summed steps): 1
    validation = Path(__file__).parents[2] / "docs" / "validation"
    shutil.copytree(validation / "llamacpp-default-short-item75", tmp_path / "default_short")
    here = tmp_path / "default_short"
    assert AT_SPEED.beside_reference_over_rows(here) == pytest.approx(1.0, abs=5e-4)
    with (here / "profile.csv").open(newline="") as fh:
        pair = ("mixed", "3", "64")  # (the phase, the decoders beside, the prompt's tokens)
        mine = [(r["context_len"], float(r["latency_ms"])) for r in csv.DictReader(fh)
                if (r["phase"], r["batch_size"], r["prompt_tokens"]) == pair]  # fmt: skip
    sums = {c: sum(m for c2, m in mine if c2 == c) for c, _ in mine}
    assert len(sums) == 2
    first = here / "speed" / "poisson_0.3" / "run1-beside.json"
    reading = json.loads(first.read_text())
    assert reading["profile_ms"] == pytest.approx(np.median(list(sums.values())), abs=0.05)
    # a reading against its own reference (item 78 on) is moved onto the rows: the
    # reference over the rows, whatever the fit charges
    first.write_text(json.dumps({**reading, "profile_ms": 0.96 * reading["profile_ms"],
                                 "against": "beside reference"}))  # fmt: skip
    assert AT_SPEED.beside_reference_over_rows(here) == pytest.approx(0.96, abs=5e-4)
    assert AT_SPEED.beside_rows_over_fit(here) / AT_SPEED.beside_reference_over_rows(
        here
    ) == pytest.approx(np.median(list(sums.values())) / _fit_of_pair(here, "3", "64"))
    assert AT_SPEED.RATIOS["speed-beside-rows"].prompt is AT_SPEED.speed_beside_ratio
    assert AT_SPEED.RATIOS["speed-beside-rows"].read is AT_SPEED.speed_batch_ratio


def _fit_of_pair(here: Path, decoders: str, tokens: str) -> float:
    """What *here*'s probe fit charges for its profile's mixed rows of *tokens* beside
    *decoders*, summed by the decoders' context, the median over the contexts."""
    profile = read_profile(here / "profile.csv")
    fitted = predict_ms(load_fit(here / "fit_probes.yaml"), profile)
    with (here / "profile.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    sums: dict[str, float] = {}
    for r, f in zip(rows, fitted, strict=True):
        if (r["phase"], r["batch_size"], r["prompt_tokens"]) == ("mixed", decoders, tokens):
            sums[r["context_len"]] = sums.get(r["context_len"], 0.0) + f
    return float(np.median(list(sums.values())))


def test_each_runs_beside_reading_against_its_own_prompt_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --per-run (item 81): -np 4 long's archive; its beside readings fell in two bands 9 %
    # apart, and the runs after a low reading took their prompts only 2 % quicker
    validation = ROOT / "docs" / "validation"
    _unpacked(["default/long"], tmp_path, monkeypatch)
    res = json.loads((validation / "llamacpp-matrix.json").read_text())["results"]["default/long"]
    runs = AT_SPEED.prompt_by_run("default/long", res, 3)
    assert [(load, k) for load, k, _, _ in runs] == [
        (load, k) for load in AT_SPEED.LOADS for k in (1, 2, 3)]  # fmt: skip
    machine = [m for load in AT_SPEED.LOADS for m in res["loads"][load]["machine"]]
    assert [r for _, _, r, _ in runs] == [m["speed_beside"] for m in machine]
    steps = [round(s, 3) for *_, s in runs]
    assert steps == [0.96, 0.98, 0.997, 1.005, 1.009, 1.024, 1.034, 1.039, 0.94, 0.967, 1.041,
                     1.035, 1.016, 1.016, 1.036]  # fmt: skip
    low = [s for _, _, r, s in runs if r < 0.95]
    high = [s for _, _, r, s in runs if r >= 0.95]
    assert (len(low), round(float(np.mean(low)), 3), round(float(np.mean(high)), 3)) == (
        6, 0.994, 1.015)  # fmt: skip
    lines = AT_SPEED.by_run_lines("default/long", runs)
    assert lines[3] == "| poisson_0.3 | 1 | 0.923 | 0.960 |"
    assert lines[-1] == "correlation over the 15 runs: 0.35"
    # a run without a beside reading (before item 75): refused, naming it
    res["loads"]["poisson_0.6"]["machine"][1]["speed_beside"] = None
    with pytest.raises(SystemExit, match=r"default/long: run 2 of poisson_0.6 has no beside"):
        AT_SPEED.prompt_by_run("default/long", res, 3)


def test_the_readings_against_their_own_runs_at_every_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/VALIDATION-llamacpp.md item 81: --per-run's correlation at each of the six points
    validation = ROOT / "docs" / "validation"
    results = json.loads((validation / "llamacpp-matrix.json").read_text())["results"]
    _unpacked(list(results), tmp_path, monkeypatch)
    got = {}
    for key in results:
        lines = AT_SPEED.by_run_lines(key, AT_SPEED.prompt_by_run(key, results[key], 3))
        got[key] = lines[-1].split()[-1]
    assert got == {"default/short": "0.71", "default/long": "0.35", "np2_b64/long": "0.38",
                   "kvu/long": "0.75", "kvu/short": "0.64", "np2_b64/short": "0.35"}  # fmt: skip
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "the correlation over a point's 15 runs is 0.35–0.75 (`-np 4` short 0.71, `-np 4` " \
           "long 0.35, `-kvu` short 0.64, `-kvu` long 0.75, `-np 2 -b 64` short 0.35 and long " \
           "0.38)" in doc  # fmt: skip


def _unpacked(keys: list[str], out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The archived points *keys* brought into *out* by ``llamacpp_store.py unpack`` (its
    checksum and finish checks included), where this script then reads them."""
    store = validation_module("llamacpp_store")
    monkeypatch.setattr(store, "OUT", out)
    monkeypatch.setattr(AT_SPEED, "OUT", out)
    store.unpack(keys, force=False)
