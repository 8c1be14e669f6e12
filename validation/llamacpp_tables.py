"""The llama.cpp matrix's tables from its stored real runs, no server needed: Tables 2
and 3 (``calibrate --from-runs`` on one load's runs, alone or with the profile;
``--table2``), Table 1 again from a stored profile (``--resimulate``), and the real
steps priced by each table's scenario (``compare --steps``; ``--steps-check``)."""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llamacpp_idle import excess_by_idle
from llamacpp_points import (
    CONFIGS,
    FIT_LOAD,
    LOADS,
    OUT,
    REGIMES,
    REQUEST_PATH_CPU_SHARE,
    fit_wake,
    has_wake,
    point_folder,
    real_runs,
    scenario,
)
from llamacpp_steps import load_ratios
from lyra_cli import run, sim_folder
from profile_columns import write_by_column, write_by_mean_step

from lyra_simpy.calibration.fitfile import load_fit
from lyra_simpy.calibration.fitruns import RUNS_LOSS
from lyra_simpy.calibration.profiles import request_path_ms


def profile_hardware(here: Path) -> str | None:
    """The machine the point in *here* was profiled (and so run) on: its profile's
    ``hardware`` (``lyra-simpy profile`` reads it from ``/proc/cpuinfo``); None without
    one. Points are run again one at a time, on whichever VM the session has: the
    matrix's one ``facts.cpu`` names only the machine of its first full run."""
    meta = here / "profile.yaml"
    return yaml.safe_load(meta.read_text()).get("hardware") if meta.is_file() else None


def with_idle(here: Path, res: dict[str, Any]) -> None:
    """*res* with the server log's lone prompts by the idle time before them, less the
    probes' (:mod:`llamacpp_idle`), when the point's log is here; and the wake after idle
    its profile's wake probe found (``fit_probes.yaml``'s ``wake``, item 33) and the
    prompt cache's save its prompt-cache probe found (``prompt_save``, item 63)."""
    if (here / "llama-server.log").is_file() and (here / "profile.csv").is_file():
        res["idle"] = [list(cell) for cell in excess_by_idle(here)]
    if (wake := fit_wake(here / "fit_probes.yaml")) is not None:
        res["wake"] = wake.model_dump()
    fit = here / "fit_probes.yaml"
    if fit.is_file() and (save := load_fit(fit).prompt_save) is not None:
        res["prompt_save"] = save.model_dump()


def charge_ratios(here: Path, scenario_file: Path, load: str) -> dict[str, Any] | None:
    """``compare --steps``: the real runs of *load* at the point *here*, their engine steps
    rebuilt from the streams and priced by *scenario_file*'s cost model as the simulator
    charges them, the request path included (:func:`lyra_simpy.live.stepcheck.step_check`):
    measured / charged for the decode-only steps (``decode``: ``steps``, ``median``,
    ``mean``, ``p10``, ``p90``; ``decode_by_batch``) and the prompt steps (``prompt``,
    ``prompt_by_tokens``), ``left_out``; None when the point has no stored runs of
    *load*."""
    from lyra_simpy.live.stepcheck import step_check
    from lyra_simpy.scenario import load_scenario

    runs = sorted((here / "real" / load).glob("run*"))
    if not runs or not scenario_file.is_file():
        return None
    check = step_check(load_scenario(scenario_file), runs)
    keys = ("decode", "prompt", "decode_by_batch", "prompt_by_tokens", "left_out")
    return {k: check[k] for k in keys}


def steps_check(key: str, res: dict[str, Any]) -> None:
    """*res* (a stored point) with ``compare --steps`` of every load's real runs against
    the scenario of each table that simulated it (:func:`charge_ratios`): Table 1's in
    ``loads[LOAD]["steps_vs_charge"]``, Tables 2 and 3's in ``table2_charge`` and
    ``table3_charge``. No server, no simulation (``--steps-check``)."""
    here = point_folder(key, OUT)
    for load, v in res["loads"].items():
        v["steps_vs_charge"] = charge_ratios(here, here / f"{load}.yaml", load)
    for table, (_, suffix, _) in FROM_RUNS.items():
        if res.get(table):
            res[f"{table}_charge"] = {load: charge_ratios(here, here / f"{load}{suffix}.yaml",
                                                          load) for load in res[table]}  # fmt: skip


def table2(cfg: str, reg: str, quick: bool, out: dict[str, Any], repeats: int,
           log: list[str], with_spells: bool = False) -> None:  # fmt: skip
    """Table 2 of one point into *out*: ``calibrate --from-runs`` on the real runs of
    :data:`FIT_LOAD` alone (``--scenario``: the prompt stops of the server's context
    checkpoints, its ``n_batch`` as the prompt budget, a prompt's attention in the KV
    cells the engine model counts, each step's passes from the replayed slots), then
    every load simulated with that fit and compared to its real runs. *with_spells*
    (``--spells``, an ablation) simulates the slow spells the fit found too
    (``cost.jitter.spells: fitted``): on these runs they overshoot
    (docs/VALIDATION-llamacpp.md item 7: a spell multiplies every step it covers, a
    prompt's second-long step included). Then Table 3 (:func:`from_runs`). Needs no
    server: ``--table2`` redoes both from the stored runs."""
    from_runs(cfg, reg, quick, out, repeats, log, "table2", with_spells)
    from_runs(cfg, reg, quick, out, repeats, log, "table3", False)


FROM_RUNS = {
    "table2": ("runs", "_t2", False),
    "table3": ("joint", "_t3", True),
}
"""Key -> (the fit's name, ``fit_<name>.yaml``; the files' suffix; fitted with the
profile): Table 2 on the fitted load's runs alone, Table 3 on its profile and those runs
together (``calibrate PROFILE --from-runs ...``)."""


def from_runs(cfg: str, reg: str, quick: bool, out: dict[str, Any], repeats: int,
              log: list[str], key: str, with_spells: bool) -> None:  # fmt: skip
    """Table *key* of :data:`FROM_RUNS` of one point into *out* (:func:`table2`)."""
    flags, regime = CONFIGS[cfg], REGIMES[reg]
    name, suffix, with_profile = FROM_RUNS[key]
    here = OUT / f"{cfg}_{reg}"
    reals = {load: real_runs(here, load, repeats) for load in LOADS}
    fit = here / f"fit_{name}.yaml"
    profile = [str(here / "profile.csv")] if with_profile else []
    # the fitted load's scenario: its server's checkpoint stops, -b, KV cells and slots
    run("calibrate", *profile, "--from-runs", *reals[FIT_LOAD], "--out", str(fit), "--loss",
        RUNS_LOSS, "--scenario", str(here / f"{FIT_LOAD}.yaml"), log=log)  # fmt: skip
    fitted = load_fit(fit)
    spells = fitted.noise.spells if fitted.noise is not None else None
    found = spells if with_spells else None
    out[key], out[f"{key}_steps"], out[f"{key}_charge"] = {}, {}, {}
    sims = here / f"sim{suffix}"
    shutil.rmtree(sims, ignore_errors=True)
    for load in LOADS:
        raw = scenario(load, flags, regime, quick, str(fit), load, out["capacity_req_s"])
        # a step rebuilt from an idle start begins at the send: its fit holds the path
        raw["workload"].pop("request_path_ms")
        raw["workload"].pop("request_path_cpu_share")
        raw["cost"].pop("wake", None)  # (as the path: the runs' steps hold what they saw)
        raw["cost"]["prompt_save"] = "off"  # (the same: a launch's save is in its step)
        if found is not None:  # the host's slow spells of the runs (calibration.md §8)
            raw["cost"]["jitter"] = {"spells": "fitted"}
        path = here / f"{load}{suffix}.yaml"
        path.write_text(yaml.safe_dump(raw))
        run("run", str(path), "--out", str(sims), "--no-figures", log=log)
        table = here / f"{load}{suffix}_compare.json"
        run("compare", str(sim_folder(sims / load)), *reals[load], "--json", str(table), log=log)
        out[key][load] = json.loads(table.read_text())
        out[f"{key}_steps"][load] = load_ratios(here, load, name)
        out[f"{key}_charge"][load] = charge_ratios(here, path, load)
    out.setdefault("fits", {})[name] = fitted.coefficients.model_dump()
    if key == "table2":
        out["runs_spells"] = None if spells is None else spells.model_dump()
        out["runs_spells_simulated"] = found is not None


ATTENTION_COUNTS = ("attention_cells", "attention_computed")
"""Count columns a newer engine model may count differently (how its passes span and
compute a prompt's attention): recounted in every stored profile, not only added."""


def with_probe_columns(here: Path, flags: list[str]) -> list[str]:
    """Give the point's stored ``profile.csv`` the count columns ``lyra-simpy profile``
    now writes (``llamacpp_probes.COUNT_COLUMNS``) by the profiler's own rules
    (``llamacpp_probes.row_counts``; the probes' layout is fixed by the grid and the
    flags, a decode row's slots every other one when it ran more than one pass): those it
    lacks added, the attention counts (:data:`ATTENTION_COUNTS`) recounted, and the step
    columns it has checked against the rules; the columns added or changed."""
    from lyra_simpy.calibration.profiles import decode_slots
    from lyra_simpy.live.llamacpp_probes import COUNT_COLUMNS, llamacpp_config, row_counts
    from lyra_simpy.live.profile_grid import ProfileGrid

    path = here / "profile.csv"
    lines = path.read_text().splitlines()
    head = lines[0].split(",")
    llama = llamacpp_config(" ".join(flags), ProfileGrid(**yaml.safe_load(
        (here / "grid.yaml").read_text())))  # fmt: skip
    assert llama is not None
    at = {name: head.index(name) for name in ("phase", "batch_size", "input_tokens",
                                              "context_len", "passes")}  # fmt: skip
    base = [k for k, name in enumerate(head) if name not in ATTENTION_COUNTS]
    kept = [name for name in head if name in COUNT_COLUMNS and name not in ATTENTION_COUNTS]
    added = [c for c in COUNT_COLUMNS if c not in kept]
    out = [",".join([*(head[k] for k in base), *added])]
    changed: set[str] = {c for c in added if c not in head}
    for line in lines[1:]:
        cell = line.split(",")
        phase, b, i, c, n = (cell[at[k]] for k in at)
        slots = decode_slots(int(b), int(n)) if phase == "decode" else None
        step = cell[head.index("prompt_step")] if "prompt_step" in head else ""
        if step:  # one step of a mixed probe's prompt (grid.mixed_timing: steps)
            i = cell[head.index("prompt_tokens")]
        value = dict(zip(COUNT_COLUMNS, row_counts(llama, phase, int(b), int(i), int(c), slots,
                                                   int(step) if step else None),
                         strict=True))  # fmt: skip
        have = {k: int(cell[head.index(k)]) for k in kept}
        assert have == {k: value[k] for k in kept}, (line, value)  # the profiler's own rules
        changed |= {
            k for k in ATTENTION_COUNTS if k in head and int(cell[head.index(k)]) != value[k]
        }
        out.append(",".join([*(cell[k] for k in base), *(str(value[k]) for k in added)]))
    if changed:
        path.write_text("\n".join(out) + "\n")
    return sorted(changed)


def table1_again(raw: dict[str, Any], fit: Path, path_cpu_share: float, wake: bool,
                 kv_layout: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A stored Table 1 scenario (*raw*, its YAML) as :func:`resimulate` runs it again:
    priced by *fit*, the fit it has just made — not the one the stored scenario names,
    which is where the point ran (a point's folder copied to another checkout, or run
    from a worktree, names the old place's fit, and its ablations would price the old
    fit without a word; item 43 caught ``--decode-step mean`` doing so); the request path
    charged to the engine at *path_cpu_share* (item 18) where it has one; the fit's wake
    after idle where *wake* (item 33); ``scheduler.kv_layout`` *kv_layout* where given
    (None: the scheduler's default, ``placed``; item 48)."""
    out = copy.deepcopy(raw)
    sched = out.get("scheduler", {})
    sched.pop("kv_layout", None)
    if kv_layout is not None:
        sched["kv_layout"] = kv_layout
    out["cost"]["path"] = str(fit)
    work = out["workload"]  # the scenario as scenario() now writes it (item 18)
    work["request_path_cpu_share"] = path_cpu_share if work.get("request_path_ms") else 0.0
    out["cost"].pop("wake", None)
    if wake:
        out["cost"]["wake"] = "fitted"
    return out


def resimulate(key: str, res: dict[str, Any], repeats: int, log: list[str],
               decode_step: str | None = None, unscaled: bool = False,
               path_cpu_share: float = REQUEST_PATH_CPU_SHARE,
               wake: bool = True, kv_layout: str | None = None,
               save_price: float | None = None) -> None:  # fmt: skip
    """Table 1 and 2 of a stored point again, from its stored profile and real runs (no
    server): the profile gets the columns the profiler now writes if it lacks them
    (:func:`with_probe_columns`), is fitted again (*decode_step* ``mean``: its decode
    rows priced by their ``mean_step_ms``, ``median`` by their ``median_gap_ms``, None as
    profiled; an ablation either way; *unscaled*: every row by its ``raw_latency_ms``,
    the profile's speed references undone), and every load's stored scenario (the arrival
    rates its real runs were replayed at) is simulated and compared again, the request
    path charged to the engine at *path_cpu_share* (item 18), and the profile's wake
    after idle where it has one unless *wake* is false (item 33; an ablation), with
    ``scheduler.kv_layout`` *kv_layout* where given (item 48; ``packed``, an ablation),
    and the prompt cache's save at *save_price* ms a token instead of the profile's
    probe's where given, into fresh memory and (a profile with ``--fill``'s second probe,
    item 87) into memory the cache held before alike (item 74, an ablation: the price the
    runs' saves paid, item 73)."""
    cfg, reg = key.split("/")
    here = OUT / f"{cfg}_{reg}"
    res["hardware"] = profile_hardware(here)
    added = with_probe_columns(here, CONFIGS[cfg])
    if added:
        print(f"{key}: profile.csv given or recounted: {', '.join(added)}", flush=True)
    fit = here / "fit_probes.yaml"
    profile = here / "profile.csv"
    if decode_step == "mean" and write_by_mean_step(profile, here / "profile_mean_step.csv"):
        profile = here / "profile_mean_step.csv"
    elif decode_step == "median" and write_by_column(
        profile, here / "profile_median_gap.csv", "median_gap_ms", "decode"
    ):
        profile = here / "profile_median_gap.csv"
    if unscaled:
        if not write_by_column(profile, here / "profile_unscaled.csv", "raw_latency_ms"):
            raise SystemExit(f"--unscaled: {key}'s profile has no raw_latency_ms column "
                             "(taken without --speed-reference)")  # fmt: skip
        profile = here / "profile_unscaled.csv"
    run("calibrate", str(profile), "--out", str(fit), "--loss", "soft_l1", log=log)
    if save_price is not None:
        priced = yaml.safe_load(fit.read_text())
        if priced.get("prompt_save") is None:
            raise SystemExit(f"--save-price: {key}'s profile has no prompt-cache probe")
        priced["prompt_save"]["ms_per_token"] = save_price
        if priced["prompt_save"].get("reused_ms_per_token") is not None:  # (one price)
            priced["prompt_save"]["reused_ms_per_token"] = save_price
        fit.write_text(yaml.safe_dump(priced, sort_keys=False))
    shutil.rmtree(here / "sim", ignore_errors=True)
    for load in LOADS:
        path = here / f"{load}.yaml"
        # (the fit by its name, beside the scenario: the folder stays portable, as
        # scenario() writes it)
        raw = table1_again(yaml.safe_load(path.read_text()), Path(fit.name), path_cpu_share,
                           wake and has_wake(str(fit)), kv_layout)  # fmt: skip
        path.write_text(yaml.safe_dump(raw))
        run("run", str(path), "--out", str(here / "sim"), "--no-figures", log=log)
        table = here / f"{load}_compare.json"
        run("compare", str(sim_folder(here / "sim" / load)), *real_runs(here, load, repeats),
            "--json", str(table), log=log)  # fmt: skip
        res["loads"][load]["table"] = json.loads(table.read_text())
        res["loads"][load]["steps_vs_fit"] = load_ratios(here, load, "probes")
        res["loads"][load]["steps_vs_charge"] = charge_ratios(here, path, load)
    res.setdefault("fits", {})["probes"] = yaml.safe_load(fit.read_text())["coefficients"]
    res["request_path_ms"] = request_path_ms(here / "profile.csv")
