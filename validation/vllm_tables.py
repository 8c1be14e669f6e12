"""The vLLM CPU matrix's tables from its stored real runs (no server): Table 1 again with
today's fit (``--reprofile``, ``--resimulate``), Table 1 priced by the probes' mean step,
the real decode steps against the fit, and Tables 2 and 3 (``calibrate --from-runs`` on
one load's runs, alone and with the profile); the simulated and real counters a load's
row shows beside them."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lyra_cli import run, sim_folder
from profile_columns import write_by_mean_step
from vllm_points import (
    FIT,
    FIT_JOINT,
    FIT_LOAD,
    FIT_POINT,
    FIT_RUNS,
    OUT,
    PROFILE,
    real_runs,
    write_yaml,
)
from vllm_steps import decode_ratios

from lyra_simpy.calibration.fitfile import load_fit
from lyra_simpy.calibration.profiles import request_path_ms
from lyra_simpy.live.compare import compare
from lyra_simpy.scenario import load_scenario


def sim_counters(sim: Path) -> dict[str, Any]:
    """The simulated run's prefix-cache hit rate and preemptions (beside vLLM's)."""
    summary = json.loads((sim / "summary.json").read_text())
    return {"prefix_cache_hit_rate": summary.get("prefix_cache_hit_rate"),
            "preemptions": summary.get("total_preemptions", 0)}  # fmt: skip


def solo_step_ms(run_dir: Path) -> float | None:
    """The median gap between a request's streamed tokens while it was the only request
    in flight (sent, not finished) in a real run: the engine's batch-1 decode step as
    the run saw it, to set beside the probe's (None when the run had no such gap)."""
    reqs = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    spans = sorted((r["arrival_s"], r["finish_s"]) for r in reqs if r.get("finish_s") is not None)
    gaps = []
    for line in (run_dir / "tokens.jsonl").read_text().splitlines():
        times = json.loads(line)["chunk_s"]
        for a, b in itertools.pairwise(times):
            if sum(1 for s, f in spans if s < b and f > a) == 1:
                gaps.append(1000.0 * (b - a))
    return round(float(np.median(gaps)), 1) if gaps else None


Simulated = tuple[dict[str, Any], Path, list[Path]]
"""A stored load's entry, its simulation's folder and its real runs (:func:`simulated`)."""


def simulated(results: dict[str, Any], repeats: int, log: list[str], tag: str,
              edit: Callable[[dict[str, Any]], None]) -> Iterator[Simulated]:  # fmt: skip
    """Every stored load's scenario, changed by *edit*, written as ``LOAD{tag}.yaml`` and
    simulated into ``sim{tag}``: each load's entry in *results*, its simulation's folder
    and its real runs."""
    for key, res in results.items():
        cfg, workload = key.split("/")
        here = OUT / f"{cfg}_{workload}"
        for load, entry in res["loads"].items():
            raw = yaml.safe_load((here / f"{load}.yaml").read_text())
            edit(raw)
            path = write_yaml(here / f"{load}{tag}.yaml", raw)
            run("run", str(path), "--out", str(here / f"sim{tag}"), "--no-figures", log=log)
            yield entry, sim_folder(here / f"sim{tag}" / load), real_runs(key, load, repeats)


def table1(results: dict[str, Any], repeats: int, log: list[str]) -> None:
    """Table 1 again for every stored load: its scenario simulated with the current
    :data:`FIT` (the Poisson rates stay those the real runs were sent at) and compared
    with the same real runs (``--reprofile``)."""

    def path_from_profile(raw: dict[str, Any]) -> None:
        raw["workload"]["request_path_ms"] = request_path_ms(PROFILE)

    for entry, sim, reals in simulated(results, repeats, log, "", path_from_profile):
        entry["table"] = compare(sim, reals)
        entry["sim"] = sim_counters(sim)


def steps_vs_fit(results: dict[str, Any], repeats: int) -> None:
    """Into every load of *results*: its real runs' decode-only steps measured /
    predicted by :data:`FIT` (:func:`vllm_steps.decode_ratios`): where Table 1's latency
    misses come from, on the row that shows them."""
    for key, res in results.items():
        cfg, workload = key.split("/")
        for load, entry in res["loads"].items():
            scenario = load_scenario(OUT / f"{cfg}_{workload}" / f"{load}.yaml")
            budget = scenario.scheduler.max_num_batched_tokens
            entry["steps_vs_fit"] = decode_ratios(real_runs(key, load, repeats), FIT, budget)


def table1_mean(results: dict[str, Any], repeats: int, log: list[str]) -> None:
    """Table 1 once more with the decode rows priced by the same probes' mean step (the
    profile's ``mean_step_ms`` column) instead of their median chunk gap (``ProfileGrid.
    decode_step``): what the choice of statistic alone does, on one profile. Nothing when
    the profile has no such column."""
    profile = OUT / "profile_mean_step.csv"
    if not write_by_mean_step(PROFILE, profile):
        return
    fit = OUT / "fit_mean_step.yaml"
    run("calibrate", str(profile), "--out", str(fit), "--loss", "soft_l1", log=log)

    def mean_fit(raw: dict[str, Any]) -> None:
        raw["cost"]["path"] = str(fit)

    for entry, sim, reals in simulated(results, repeats, log, "_mean", mean_fit):
        entry["table1_mean"] = compare(sim, reals)


def calibrate(fit: dict[str, Any], log: list[str]) -> dict[str, Any]:
    """Calibrate :data:`FIT` on :data:`PROFILE` (``soft_l1``); *fit* with its
    coefficients and report."""
    run("calibrate", str(PROFILE), "--out", str(FIT), "--loss", "soft_l1", log=log)
    fitted = yaml.safe_load(FIT.read_text())
    fit["coefficients"] = fitted["coefficients"]
    fit["report"] = {k: v for k, v in fitted.items() if k != "coefficients"}
    fit["request_path_ms"] = request_path_ms(PROFILE)
    return fit


def table2(results: dict[str, Any], repeats: int, log: list[str],
           with_spells: bool = True) -> dict[str, Any]:  # fmt: skip
    """Table 2 into every load of *results*: calibrate on the real runs of
    :data:`FIT_LOAD` of :data:`FIT_POINT` alone, then simulate each load's scenario again
    with that fit (its ``cost.path`` swapped, and the slow spells it found:
    ``cost.jitter.spells: fitted``) and compare with the same real runs; then Table 3,
    the same with the profile and those runs in one fit (:data:`FIT_JOINT`).
    Returns the fits' coefficients."""
    runs = [str(p) for p in real_runs(FIT_POINT, FIT_LOAD, repeats)]
    cfg, workload = FIT_POINT.split("/")
    fitted_on = OUT / f"{cfg}_{workload}" / f"{FIT_LOAD}.yaml"  # its token budget
    run("calibrate", "--from-runs", *runs, "--out", str(FIT_RUNS), "--loss", "soft_l1",
        "--scenario", str(fitted_on), log=log)  # fmt: skip
    fitted = load_fit(FIT_RUNS)
    found = fitted.noise.spells if fitted.noise is not None and with_spells else None

    def runs_fit(raw: dict[str, Any]) -> None:
        raw["cost"]["path"] = str(FIT_RUNS)
        if found is not None:  # the host's slow spells the runs showed (calibration.md §8)
            raw["cost"]["jitter"] = {"spells": "fitted"}
        # the runs alone: their rebuilt steps hold what the path adds to the first
        raw["workload"].pop("request_path_ms", None)

    for entry, sim, reals in simulated(results, repeats, log, "_t2", runs_fit):
        entry["table2"] = compare(sim, reals)
        entry["solo_step_ms"] = [solo_step_ms(r) for r in reals]
    # Table 3: the probes and the same runs in one fit (no spells, as llama.cpp's)
    run("calibrate", str(PROFILE), "--from-runs", *runs, "--out", str(FIT_JOINT), "--loss",
        "soft_l1", "--scenario", str(fitted_on), log=log)  # fmt: skip

    def joint_fit(raw: dict[str, Any]) -> None:
        raw["cost"]["path"] = str(FIT_JOINT)
        raw["workload"].pop("request_path_ms", None)  # (as Table 2: the runs hold it)

    for entry, sim, reals in simulated(results, repeats, log, "_t3", joint_fit):
        entry["table3"] = compare(sim, reals)
    spells = None if found is None else found.model_dump()
    return {"coefficients": fitted.coefficients.model_dump(),
            "joint_coefficients": load_fit(FIT_JOINT).coefficients.model_dump(),
            "fit_on": f"{FIT_POINT} {FIT_LOAD}", "spells": spells}  # fmt: skip
