"""``python validation/validate_cpu.py --matrix``: the ``llamacpp`` engine model against a
real ``llama-server`` over server configurations × length regimes × loads (issue 12).

For each server configuration of :data:`CONFIGS` (launched as a user would: llama.cpp's
defaults for every flag not listed) and each length regime of :data:`REGIMES`:

1. start the server, ``lyra-simpy profile`` it when the host runs at its quickest
   (:mod:`speed_gate`; slots pinned, the extra columns ``steps``/``passes``/
   ``checkpoints``/``attention_cells``; :mod:`lyra_simpy.live.profile`), check its row
   for ``-np`` sequences against that step measured right after and profile again while
   it is off (:func:`full_batch_step`, :func:`speed_gate.batch_checked`), and
   ``calibrate`` it with the robust ``soft_l1`` loss (Table 1's fit: probes alone);
2. simulate a closed loop of ``-np`` clients to get the capacity, then every load of
   :data:`LOADS` (Poisson at 0.3/0.6/0.9 of it, closed loops of 4 and 8): simulate, replay
   :data:`REPEATS` times on the server, each once a lone request decodes within
   ``speed_gate.GATE`` of the profile's speed (the load average and that step read before
   and after each real run), compare (median of the real runs, their spread);
3. Table 2: ``calibrate --from-runs`` on the real runs of the medium Poisson load alone
   (:func:`table2`, loss ``calibrate --from-runs``'s own default,
   ``fitruns.RUNS_LOSS``, named in each command), then simulate every load again with that fit
   and compare to the same real runs; Table 3: the same with the profile and those runs
   fitted together.

The scenarios are written from :func:`scenario` into the results folder: ``engine:
{name: llamacpp, command: ...}`` with the launch flags, so the preset sets every knob.
``LYRA_QUICK=1``: the default configuration and the short regime only, fewer requests.
``--only default/short ...`` runs those points again (say, one disturbed by other work on
the machine) and keeps the others; ``--table2`` redoes Tables 2 and 3 of every stored
point from its real runs (no server); ``--resimulate`` refits every stored point's profile
(giving it the ``attention_cells`` column it lacks) and redoes every table from the
stored real runs (no server; with ``--only``, those points); ``--doc-only`` rewrites
the document from the numbers.
Run it with ``tox -e validate-cpu -- --matrix`` (or ``python validation/validate_cpu.py
--matrix``).
Numbers go to ``results/validation-llamacpp/matrix.json``; :func:`write_section` puts the
tables into ``docs/VALIDATION-llamacpp.md`` between markers.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import speed_gate
from llamacpp_idle import excess_by_idle
from llamacpp_steps import load_ratios
from profile_columns import write_by_column, write_by_mean_step

from lyra_simpy.calibration.fitfile import load_fit
from lyra_simpy.calibration.fitruns import RUNS_LOSS
from lyra_simpy.calibration.profiles import request_path_ms
from lyra_simpy.calibration.wakefit import WakeFit
from lyra_simpy.cli import main as cli_main
from lyra_simpy.errors import LyraError
from lyra_simpy.live import llamacpp
from lyra_simpy.machine import cpu_model, load_average

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "validation-llamacpp"
DOC = ROOT / "docs" / "VALIDATION-llamacpp.md"
"""Where the tables go (between :data:`START` and :data:`END`; the rest of the file, the
reading of the tables, is written by hand and kept)."""
PUBLISHED = ROOT / "docs" / "validation" / "llamacpp-matrix.json"
"""A copy of ``matrix.json`` kept with the document (``--doc-only`` reads it in a clone
without the run's results)."""
CONFIGS: dict[str, list[str]] = {
    "default": ["-np", "4", "-c", "4096", "-t", "2"],
    "kvu": ["-np", "4", "-c", "4096", "-t", "2", "-kvu"],
    "np2_b64": ["-np", "2", "-c", "4096", "-t", "2", "-b", "64"],
}
"""Launch flags beyond ``-m``/``--host``/``--port``: per-slot KV and context checkpoints
on (llama.cpp's defaults once ``-np`` is given); one unified KV buffer; fewer slots and a
logical batch that chunks the longer prompts."""
REGIMES: dict[str, dict[str, Any]] = {
    "short": {"input": (16, 64), "output": (8, 32), "requests": 40, "quick": 16},
    "long": {"input": (200, 400), "output": (80, 120), "requests": 24, "quick": 10},
}
LOADS = {
    "poisson_0.3": 0.3,
    "poisson_0.6": 0.6,
    "poisson_0.9": 0.9,
    "closed_4": 4,
    "closed_8": 8,
}
FIT_LOAD = "poisson_0.6"
"""The load whose real runs Table 2 calibrates on."""
REPEATS = int(os.environ.get("LYRA_VALIDATE_REPEATS", "3"))
EXTRA_BODY = '{"cache_prompt": false}'
METRICS = (
    "output_throughput",
    "median_ttft_ms",
    "median_tpot_ms",
    "median_e2el_ms",
    "p90_ttft_ms",
    "p90_tpot_ms",
    "p90_e2el_ms",
)


REQUEST_PATH_CPU_SHARE = 1.0
"""``workload.request_path_cpu_share`` of Table 1's scenarios: llama-server runs ``-t 2``
on this host's 2 cores beside its HTTP threads and the replay client, so all of a request's
path (the profile's ``request_path_ms``) is work taken from the engine's cores, charged
to the iteration it lands in (item 18). Not fitted: the path is the profile's measure and
the share its upper end, what the host's core count gives."""


def scenario(name: str, flags: list[str], regime: dict[str, Any], quick: bool, fit: str,
             load: str, capacity: float | None) -> dict[str, Any]:  # fmt: skip
    """The scenario of one point (the preset reads the launch flags), with the request
    path its profile (``profile.csv`` beside *fit*) measured (0 for the profiles taken
    before it was; :func:`~lyra_simpy.calibration.profiles.request_path_ms`)."""
    value = LOADS[load]
    if load.startswith("closed"):
        arrival: dict[str, Any] = {"name": "closed_loop", "concurrency": int(value),
                                   "think_time_s": 0.005}  # fmt: skip
    else:
        assert capacity is not None
        arrival = {"name": "poisson", "rate_per_s": round(value * capacity, 4)}
    lo, hi = regime["input"]
    olo, ohi = regime["output"]
    path_ms = request_path_ms(Path(fit).parent / "profile.csv")
    return {
        "name": name,
        "description": f"llama-server {' '.join(flags)}: {load}",
        "seed": 11,
        "engine": {"name": "llamacpp", "command": "llama-server " + " ".join(flags)},
        "workload": {
            "num_requests": regime["quick" if quick else "requests"],
            "arrival": arrival,
            "input_tokens": {"name": "uniform", "low": lo, "high": hi},
            "output_tokens": {"name": "uniform", "low": olo, "high": ohi},
            "request_path_ms": path_ms,
            "request_path_cpu_share": REQUEST_PATH_CPU_SHARE if path_ms else 0.0,
        },
        # Gemma 3 has sliding-window layers (llama.cpp checkpoints its prompts) and a
        # 32768-token training context; cache_prompt: false is what the replay sends
        "scheduler": {"name": "llamacpp", "sliding_window": True, "cache_prompt": False},
        "cost": {
            "name": "profile",
            "path": fit,
            "decode_table": True,
            **({"wake": "fitted"} if _has_wake(fit) else {}),
        },
    }


def _fit_wake(fit: Path) -> WakeFit | None:
    """The profile's wake after idle (``grid.wake_gaps_s``, :data:`WAKE_GAPS_S`; item 33)
    the fit file at *fit* holds (None: no such file, or no wake in it)."""
    return load_fit(fit).wake if fit.is_file() else None


def _has_wake(fit: str) -> bool:
    """The fit file at *fit* holds a wake: Table 1 charges it (``cost.wake: fitted``)."""
    return _fit_wake(Path(fit)) is not None


BATCH_BEFORE = False
"""``--batch-before``: :func:`full_batch_step` once more right before each real run (the
gate passed), kept as the run's ``batch_before`` beside the profile's full-batch row
(``gate.batch_row_ms``): does the host's step under load, read just before a run,
forecast the run's steps better than the gate's lone probe does, which item 34 found
no forecast (``validation/llamacpp_at_speed.py --ratio batch``)?"""
GATE_AFTER = 0
"""Times a real run is taken again when the speed probe right after it is outside the gate
(``--gate-after N``; :func:`speed_gate.gated_run`); 0: the gate holds before a run only."""
SPEED_REFERENCE: str | None = None
"""``--speed-reference MODE``: a lone decode timed beside every profile measurement
(``grid.speed_reference``: ``record``, or ``scale`` to price each measurement against
it), one profile a point (not retried until the host runs at its floor), and the real
runs gated on the profile's typical reference step instead of the floor."""


WANDER_S = 60.0
"""The profile's wander probe (``grid.wander_s``): a minute of full-batch decode steps,
from which ``calibrate`` reads the host's drift over seconds for Table 1's band
(``validation/llamacpp_noise.py --wander``, item 32). Its streams' outputs (the grid's
default 512) and the regimes' shortest prompt fit every configuration's slot context
(1 024 cells at ``-np 4``)."""


WAKE_GAPS_S = [0.1, 0.3, 1.0, 3.0]
"""The profile's wake probe (``grid.wake_gaps_s``): lone prompts of the regime's
shortest length after these idle times and back to back, 8 rounds, from which
``calibrate`` reads the engine's wake after idle that Table 1 charges (``cost.wake:
fitted``, item 33): the real runs' lone prompts after ≥ 0.3 s of idle took 12–17 ms
more than their probes (``validation/llamacpp_idle.py``, item 32's set). The gaps span
the runs' idle times at the lightest load; about 50 s a profile."""


def grid(flags: list[str], regime: dict[str, Any]) -> dict[str, Any]:
    """The profile grid for a server with *flags*, covering *regime*'s lengths
    (with :data:`SPEED_REFERENCE`, its ``speed_reference``; :data:`WANDER_S` of the
    wander probe, :data:`WAKE_GAPS_S` of the wake probe)."""
    slots = int(flags[flags.index("-np") + 1])
    lo, hi = regime["input"]
    prompts = sorted({lo, (lo + hi) // 2, hi, 2 * hi})
    return {
        "prefill_tokens": prompts,
        "decode_batch": [b for b in (1, 2, 3, 4) if b <= slots],
        "decode_context": [lo, hi],
        "decode_steps": 16,
        "mixed_batch": [b for b in (1, 3) if b < slots],
        "mixed_prompt_tokens": [lo, hi],
        "mixed_context": [lo, hi],
        "fragmented_decode_batch": [2] if slots >= 3 else [],
        "prefill_together": sorted({2, slots}) if slots >= 2 else [],
        "sliding_window": True,
        "repeats": 3,
        "extra_body": {"cache_prompt": False},
        "wander_s": WANDER_S,
        "wake_gaps_s": WAKE_GAPS_S,
        **({"speed_reference": SPEED_REFERENCE} if SPEED_REFERENCE else {}),
    }


BATCH_CHECK_ROUNDS = 3
"""Rounds of the full-batch check (:func:`full_batch_step`), each over the grid's decode
contexts, :data:`BATCH_CHECK_PAUSE_S` apart."""
BATCH_CHECK_PAUSE_S = 5.0


def full_batch_step(url: str, grid_file: Path, slots: int) -> float | None:
    """The step of *slots* sequences decoding together right now, as the profile measures
    its rows (:meth:`~lyra_simpy.live.prober.Prober.decode`: slots 0..slots-1 pinned, the
    grid's decode contexts and steps, fresh prompt ids): the median of
    :data:`BATCH_CHECK_ROUNDS` rounds over those contexts (None when none answered;
    :func:`speed_gate.batch_checked` compares it with the profile's row)."""
    from lyra_simpy.live.prober import Prober
    from lyra_simpy.live.profile_grid import load_grid

    grid = load_grid(grid_file)
    prober = Prober.for_endpoint(url, "openai", grid, int(np.random.default_rng().integers(2**62)))
    prober.pin = True
    steps: list[float] = []

    async def rounds() -> None:
        for k in range(BATCH_CHECK_ROUNDS):
            if k:
                await asyncio.sleep(BATCH_CHECK_PAUSE_S)
            for ctx in grid.decode_context:
                gap, mean, _ = await prober.decode(slots, ctx)
                steps.append(mean if grid.decode_step == "mean" else gap)

    try:
        asyncio.run(rounds())
    except LyraError as exc:  # a failed request: the check reads none (profile again)
        print(f"full-batch check failed: {exc}", flush=True)
    good = [s for s in steps if np.isfinite(s)]
    return float(np.median(good)) if good else None


def speed_probe(url: str) -> float | None:
    """The server's batch-1 decode step right now, the prompt not cached
    (:func:`speed_gate.lone_decode_step`)."""
    return speed_gate.lone_decode_step(url, {"cache_prompt": False})


def run(*args: str, log: list[str]) -> None:
    log.append("lyra-simpy " + " ".join(shlex.quote(a) for a in args))
    print("\n$ " + log[-1], flush=True)
    code = cli_main(list(args))
    if code != 0:
        raise SystemExit(f"matrix: `lyra-simpy {args[0]}` exited {code}")


def _sim(folder: Path) -> Path:
    found = [p for p in folder.iterdir() if (p / "summary.json").is_file()]
    assert len(found) == 1, folder
    return found[0]


def point(cfg: str, reg: str, quick: bool, log: list[str]) -> dict[str, Any]:
    """Profile, calibrate, simulate, replay and compare one (configuration, regime)."""
    flags, regime = CONFIGS[cfg], REGIMES[reg]
    here = OUT / f"{cfg}_{reg}"
    here.mkdir(parents=True, exist_ok=True)
    (here / "grid.yaml").write_text(yaml.safe_dump(grid(flags, regime)))
    binary, model = llamacpp.server_binary(), llamacpp.model_file()
    out: dict[str, Any] = {"flags": flags, "loads": {}, "table2": {}, "fits": {}}
    with llamacpp.Server(binary, model, flags, here / "llama-server.log") as srv:
        prof, fit = here / "profile.csv", here / "fit_probes.yaml"
        out["load_profile"] = load_average()

        def take() -> Path:
            run("profile", "--endpoint", srv.url, "--out", str(prof), "--grid",
                str(here / "grid.yaml"), "--flags", " ".join(flags), log=log)  # fmt: skip
            return prof

        def probe() -> float | None:
            return speed_probe(srv.url)

        def replay(scenario_file: Path, folder: Path, record: dict[str, Any]) -> None:
            if BATCH_BEFORE:  # (after the gate, right before the run)
                record["batch_before"] = full_batch_step(srv.url, here / "grid.yaml", slots)
            run("replay", str(scenario_file), "--endpoint", srv.url, "--out", str(folder),
                "--timeout-s", "300", "--time-limit-s", "1200", "--extra-body", EXTRA_BODY,
                log=log)  # fmt: skip

        tries = 1 if SPEED_REFERENCE else speed_gate.PROFILE_TRIES
        out["gate"] = speed_gate.profile_at_floor(
            probe, take, "validate-cpu --matrix", check="probe", tries=tries
        )
        slots = int(flags[flags.index("-np") + 1])

        def retake() -> Path:
            """The profile again, at the floor the first one found; the one it replaces
            kept beside it as ``profile-superseded-K.*``, its gate record in the list
            ``superseded``."""
            gate, kept = out["gate"], ("profile_tries", "profile_step_ms",
                                       "probe_after_profile_ms")  # fmt: skip
            gate["superseded"].append({k: gate[k] for k in kept})
            n = len(gate["superseded"])
            for old in here.glob("profile.*"):  # .csv, .yaml, .speed.csv
                old.rename(old.with_name(f"profile-superseded-{n}{''.join(old.suffixes)}"))
            again = speed_gate.profile_at_floor(probe, take, "validate-cpu --matrix",
                                                gate["floor_ms"], "probe", tries)  # fmt: skip
            gate.update({k: again[k] for k in kept})
            return prof

        out["gate"]["superseded"] = []
        _, out["gate"]["batch_check"] = speed_gate.batch_checked(
            prof, slots, functools.partial(full_batch_step, srv.url, here / "grid.yaml", slots),
            retake)  # fmt: skip
        if SPEED_REFERENCE:  # the runs at the speed the rows were priced at
            speed = yaml.safe_load(prof.with_suffix(".yaml").read_text())["speed_reference"]
            out["gate"]["speed_reference"] = speed
            out["gate"]["run_ref_ms"] = speed["median_ms"]
        ref_ms = out["gate"]["run_ref_ms"]
        out["gate"]["tolerance"] = speed_gate.GATE
        out["gate"]["batch_row_ms"] = speed_gate.batch_row(prof, slots)
        run("calibrate", str(prof), "--out", str(fit), "--loss", "soft_l1", log=log)
        # capacity: every slot always busy (a closed loop of -np clients)
        cap_raw = scenario("capacity", flags, regime, quick, str(fit), "closed_4", None)
        cap_raw["workload"]["arrival"]["concurrency"] = int(flags[flags.index("-np") + 1])
        cap_file = here / "capacity.yaml"
        cap_file.write_text(yaml.safe_dump(cap_raw))
        run("run", str(cap_file), "--out", str(here / "capacity"), "--no-figures", log=log)
        capacity = json.loads((_sim(here / "capacity" / "capacity") / "summary.json")
                              .read_text())["request_throughput"]  # fmt: skip
        out["capacity_req_s"] = capacity
        out["request_path_ms"] = request_path_ms(here / "profile.csv")  # (item 18)
        for load in LOADS:
            raw = scenario(load, flags, regime, quick, str(fit), load, capacity)
            path = here / f"{load}.yaml"
            path.write_text(yaml.safe_dump(raw))
            run("run", str(path), "--out", str(here / "sim"), "--no-figures", log=log)
            runs, loads = real_runs(here, load, REPEATS), []
            for real in runs:
                before, batch = load_average(), {}
                got = speed_gate.gated_run(probe, ref_ms,
                                           functools.partial(replay, path, record=batch),
                                           Path(real), "validate-cpu --matrix",
                                           GATE_AFTER)  # fmt: skip
                loads.append({"before": before, "after": load_average(), **got, **batch})
            table = here / f"{load}_compare.json"
            run("compare", str(_sim(here / "sim" / load)), *runs, "--json", str(table), log=log)
            out["loads"][load] = {"table": json.loads(table.read_text()), "machine": loads,
                                  "steps_vs_fit": load_ratios(here, load, "probes"),
                                  "steps_vs_charge": charge_ratios(here, path, load)}  # fmt: skip
    table2(cfg, reg, quick, out, REPEATS, log)
    out["fits"]["probes"] = yaml.safe_load(fit.read_text())["coefficients"]
    with_idle(here, out)
    return out


def with_idle(here: Path, res: dict[str, Any]) -> None:
    """*res* with the server log's lone prompts by the idle time before them, less the
    probes' (:mod:`llamacpp_idle`), when the point's log is here; and the wake after idle
    its profile's wake probe found (``fit_probes.yaml``'s ``wake``, item 33)."""
    if (here / "llama-server.log").is_file() and (here / "profile.csv").is_file():
        res["idle"] = [list(cell) for cell in excess_by_idle(here)]
    if (wake := _fit_wake(here / "fit_probes.yaml")) is not None:
        res["wake"] = wake.model_dump()


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
    here = OUT / key.replace("/", "_")
    for load, v in res["loads"].items():
        v["steps_vs_charge"] = charge_ratios(here, here / f"{load}.yaml", load)
    for table, (_, suffix, _) in FROM_RUNS.items():
        if res.get(table):
            res[f"{table}_charge"] = {load: charge_ratios(here, here / f"{load}{suffix}.yaml",
                                                          load) for load in res[table]}  # fmt: skip


def real_runs(here: Path, load: str, repeats: int) -> list[str]:
    """The folders of a point's real runs of *load* (``real/LOAD/runK``)."""
    return [str(here / "real" / load / f"run{k}") for k in range(1, repeats + 1)]


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
        if found is not None:  # the host's slow spells of the runs (calibration.md §8)
            raw["cost"]["jitter"] = {"spells": "fitted"}
        path = here / f"{load}{suffix}.yaml"
        path.write_text(yaml.safe_dump(raw))
        run("run", str(path), "--out", str(sims), "--no-figures", log=log)
        table = here / f"{load}{suffix}_compare.json"
        run("compare", str(_sim(sims / load)), *reals[load], "--json", str(table), log=log)
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
        stride = 2 if phase == "decode" and int(n) > 1 else 1  # fragmented_decode_batch
        step = cell[head.index("prompt_step")] if "prompt_step" in head else ""
        if step:  # one step of a mixed probe's prompt (grid.mixed_timing: steps)
            i = cell[head.index("prompt_tokens")]
        value = dict(zip(COUNT_COLUMNS, row_counts(llama, phase, int(b), int(i), int(c), stride,
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


def resimulate(key: str, res: dict[str, Any], repeats: int, log: list[str],
               mean_step: bool = False, unscaled: bool = False,
               path_cpu_share: float = REQUEST_PATH_CPU_SHARE,
               wake: bool = True) -> None:  # fmt: skip
    """Table 1 and 2 of a stored point again, from its stored profile and real runs (no
    server): the profile gets the columns the profiler now writes if it lacks them
    (:func:`with_probe_columns`), is fitted again (*mean_step*: its decode rows priced by
    their ``mean_step_ms``, an ablation; *unscaled*: every row by its ``raw_latency_ms``,
    the profile's speed references undone), and every load's stored scenario (the arrival
    rates its real runs were replayed at) is simulated and compared again, the request
    path charged to the engine at *path_cpu_share* (item 18), and the profile's wake
    after idle where it has one unless *wake* is false (item 33; an ablation)."""
    cfg, reg = key.split("/")
    here = OUT / f"{cfg}_{reg}"
    added = with_probe_columns(here, CONFIGS[cfg])
    if added:
        print(f"{key}: profile.csv given or recounted: {', '.join(added)}", flush=True)
    fit = here / "fit_probes.yaml"
    profile = here / "profile.csv"
    if mean_step and write_by_mean_step(profile, here / "profile_mean_step.csv"):
        profile = here / "profile_mean_step.csv"
    if unscaled:
        if not write_by_column(profile, here / "profile_unscaled.csv", "raw_latency_ms"):
            raise SystemExit(f"--unscaled: {key}'s profile has no raw_latency_ms column "
                             "(taken without --speed-reference)")  # fmt: skip
        profile = here / "profile_unscaled.csv"
    run("calibrate", str(profile), "--out", str(fit), "--loss", "soft_l1", log=log)
    shutil.rmtree(here / "sim", ignore_errors=True)
    for load in LOADS:
        path = here / f"{load}.yaml"
        raw = yaml.safe_load(path.read_text())
        work = raw["workload"]  # the scenario as scenario() now writes it (item 18)
        work["request_path_cpu_share"] = path_cpu_share if work.get("request_path_ms") else 0.0
        raw["cost"].pop("wake", None)
        if wake and _has_wake(str(fit)):
            raw["cost"]["wake"] = "fitted"
        path.write_text(yaml.safe_dump(raw))
        run("run", str(path), "--out", str(here / "sim"), "--no-figures", log=log)
        table = here / f"{load}_compare.json"
        run("compare", str(_sim(here / "sim" / load)), *real_runs(here, load, repeats),
            "--json", str(table), log=log)  # fmt: skip
        res["loads"][load]["table"] = json.loads(table.read_text())
        res["loads"][load]["steps_vs_fit"] = load_ratios(here, load, "probes")
        res["loads"][load]["steps_vs_charge"] = charge_ratios(here, path, load)
    res.setdefault("fits", {})["probes"] = yaml.safe_load(fit.read_text())["coefficients"]
    res["request_path_ms"] = request_path_ms(here / "profile.csv")


def stored_points(keep: dict[str, Any], only: list[str] | None
                  ) -> list[tuple[str, dict[str, Any]]]:  # fmt: skip
    """The stored points (key, result) of *keep* that *only* names (all without it); a
    name not stored is one line naming the stored ones, and exit status 1."""
    stored = keep.get("results", {})
    missing = [p for p in only or [] if p not in stored]
    if missing:
        raise SystemExit(f"--only: no stored point {missing[0]!r}; stored: {list(stored)}")
    return [(k, v) for k, v in stored.items() if not only or k in only]


def main(argv: list[str] | None = None) -> int:
    """Run the matrix (``--only CFG/REGIME ...``: those points again, kept beside the
    others in ``matrix.json``; ``--doc-only``: rewrite the document from it)."""
    parser = argparse.ArgumentParser(prog="validate_cpu.py --matrix")
    parser.add_argument("--only", nargs="+", metavar="CFG/REGIME", default=None,
                        help=f"points to run again, e.g. default/short (of {list(CONFIGS)} "
                        f"x {list(REGIMES)})")  # fmt: skip
    parser.add_argument("--table2", action="store_true",
                        help="redo Tables 2 and 3 of every stored point from its real runs "
                        "(no server needed)")  # fmt: skip
    parser.add_argument("--resimulate", action="store_true",
                        help="refit each stored point's profile and redo Tables 1 and "
                        "2 from its stored runs (no server; --only: those points)")  # fmt: skip
    parser.add_argument("--summary", type=Path, metavar="JSON", default=None,
                        help="print the summary table of a stored matrix JSON (e.g. "
                        "docs/validation/llamacpp-kvu-long-steady.json); runs nothing")  # fmt: skip
    parser.add_argument("--steps-check", action="store_true",
                        help="price every stored point's real runs by the scenarios of its "
                        "three tables (compare --steps) into matrix.json and the document; "
                        "no server, no simulation (--only: those points)")  # fmt: skip
    parser.add_argument("--doc-only", action="store_true",
                        help="rewrite the document from the stored numbers")  # fmt: skip
    parser.add_argument("--decode-step", choices=["median", "mean"], default="median",
                        help="with --resimulate: price the stored profiles' decode rows by "
                        "the probes' median gap (default) or mean step (an ablation)")  # fmt: skip
    parser.add_argument(
        "--gate",
        type=float,
        default=speed_gate.GATE,
        metavar="F",
        help="a real run starts once the speed probe is within this fraction "
        f"of the profile's floor (default {speed_gate.GATE}; kept per point)",
    )
    parser.add_argument("--unscaled", action="store_true",
                        help="with --resimulate: price the stored profiles' rows without "
                        "their speed references (raw_latency_ms; an ablation)")  # fmt: skip
    parser.add_argument("--path-cpu-share", type=float, default=REQUEST_PATH_CPU_SHARE,
                        metavar="F", help="with --resimulate: Table 1's "
                        f"request_path_cpu_share (default {REQUEST_PATH_CPU_SHARE}; 0: "
                        "item 17's Table 1, the path not charged to the engine; an "
                        "ablation)")  # fmt: skip
    parser.add_argument("--no-wake", action="store_true",
                        help="with --resimulate: Table 1 without the profile's wake after "
                        "idle (item 33; an ablation)")  # fmt: skip
    parser.add_argument("--speed-reference", choices=["record", "scale"], default=None,
                        help="profile with a speed reference beside each measurement "
                        "(scale: each priced against it) and gate the runs on its typical "
                        "step (kept per point)")  # fmt: skip
    parser.add_argument("--batch-before", action="store_true",
                        help="time the full batch's decode step right before each real run "
                        "(kept as batch_before; llamacpp_at_speed.py --ratio batch)")  # fmt: skip
    parser.add_argument("--gate-after", type=int, default=0, metavar="N",
                        help="also hold the gate after each real run: one read outside it "
                        "is set aside (kept as out-of-band-RUN-K) and taken again, at most N "
                        "times (default 0: the gate holds before a run only)")  # fmt: skip
    parser.add_argument("--spells", action="store_true",
                        help="Table 2 with the slow spells its fit found (an ablation: "
                        "the document then shows it so; run again without it)")  # fmt: skip
    args = parser.parse_args(argv or [])
    if not 0 < args.gate < 1:
        raise SystemExit(f"--gate: got {args.gate}, must be a fraction between 0 and 1")
    speed_gate.GATE = args.gate  # (read by speed_gate.within at each probe)
    if args.gate_after < 0:
        raise SystemExit(f"--gate-after: got {args.gate_after}, must be 0 or more")
    global SPEED_REFERENCE, GATE_AFTER, BATCH_BEFORE
    SPEED_REFERENCE = args.speed_reference
    BATCH_BEFORE = args.batch_before
    GATE_AFTER = args.gate_after
    if args.summary is not None:
        results = json.loads(args.summary.read_text())["results"]
        print("\n".join(summary(results)))
        if bands := cells_by_steps(results):
            print("\nTable 1's cells in target by how far the real decode steps ran from its "
                  "charge: " + "; ".join(f"{k}: {ok} / {n} at {loads} loads"
                                         for k, (ok, n, loads) in bands.items()))  # fmt: skip
        return 0
    os.chdir(ROOT)
    quick = os.environ.get("LYRA_QUICK") == "1"
    stored = OUT / "matrix.json"
    source = stored if stored.is_file() else PUBLISHED
    keep: dict[str, Any] = json.loads(source.read_text()) if source.is_file() else {}
    if args.resimulate:
        log = keep.get("commands", [])
        for key, res in stored_points(keep, args.only):
            cfg, reg = key.split("/")
            resimulate(key, res, keep["facts"]["repeats"], log, args.decode_step == "mean",
                       args.unscaled, args.path_cpu_share, not args.no_wake)  # fmt: skip
            table2(cfg, reg, keep["facts"]["quick"], res, keep["facts"]["repeats"], log,
                   args.spells)  # fmt: skip
            with_idle(OUT / f"{cfg}_{reg}", res)
        keep["facts"]["resimulated"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        stored.write_text(json.dumps({**keep, "commands": log}, indent=1))
        write_section(DOC, keep["facts"], keep["results"], log)
        return 0
    if args.steps_check:
        for key, res in stored_points(keep, args.only):
            steps_check(key, res)
        stored.write_text(json.dumps(keep, indent=1))
        write_section(DOC, keep["facts"], keep["results"], keep.get("commands"))
        return 0
    if args.table2:
        log = keep.get("commands", [])
        for key, res in keep["results"].items():
            cfg, reg = key.split("/")
            table2(cfg, reg, keep["facts"]["quick"], res, keep["facts"]["repeats"], log,
                   args.spells)  # fmt: skip
        stored.write_text(json.dumps({**keep, "commands": log}, indent=1))
    if args.doc_only or args.table2:
        for key, res in keep.get("results", {}).items():
            with_idle(OUT / key.replace("/", "_"), res)
        write_section(DOC, keep["facts"], keep["results"], keep.get("commands"))
        return 0
    configs = ["default"] if quick else list(CONFIGS)
    regimes = ["short"] if quick else list(REGIMES)
    points = [f"{c}/{r}" for c in configs for r in regimes]
    if args.only:
        bad = [p for p in args.only if p not in [f"{c}/{r}" for c in CONFIGS for r in REGIMES]]
        if bad:
            raise SystemExit(f"--only: unknown point {bad[0]!r}; allowed: CFG/REGIME with CFG "
                             f"in {list(CONFIGS)}, REGIME in {list(REGIMES)}")  # fmt: skip
        points = args.only
    facts: dict[str, Any] = {"quick": quick, "repeats": REPEATS, "cpu": cpu_model(),
                             "cores": os.cpu_count(), "load_start": load_average()}  # fmt: skip
    log: list[str] = keep.get("commands", []) if args.only else []
    results: dict[str, Any] = dict(keep.get("results", {})) if args.only else {}
    if args.only:
        before = keep.get("facts", {})
        # points run again earlier stay named; each of these once it has finished
        facts = {**before, "rerun": [k for k in before.get("rerun", []) if k in results]}
    started = time.time()
    for key in points:
        cfg, reg = key.split("/")
        if args.only:  # the point's old files go (replay does not overwrite a run)
            shutil.rmtree(OUT / f"{cfg}_{reg}", ignore_errors=True)
        results[key] = point(cfg, reg, quick, log)
        results[key]["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        if args.only and key not in facts["rerun"]:
            facts["rerun"].append(key)
        facts["load_end"] = load_average()
        facts.setdefault("wall_min", 0)
        if not args.only:
            facts["wall_min"] = round((time.time() - started) / 60, 1)
        OUT.mkdir(parents=True, exist_ok=True)
        stored.write_text(
            json.dumps({"facts": facts, "results": results, "commands": log}, indent=1)
        )
    write_section(DOC, facts, results, log)
    return 0


START, END = "<!-- llamacpp-matrix:start -->", "<!-- llamacpp-matrix:end -->"


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def _row(row: dict[str, Any]) -> tuple[str, bool]:
    """The cell for one metric and whether it meets the target: throughput within 5 %;
    p50s within 10 % or the real spread, whichever is wider; p90s within the spread."""
    err, spread, name = row["error"], row["spread"], row["metric"]
    if name == "output_throughput":
        ok = abs(err) <= 0.05
    elif name.startswith("median"):
        ok = abs(err) <= max(0.10, spread)
    else:
        ok = abs(err) <= spread
    return f"{_pct(err)} (±{100 * spread:.0f} %){'' if ok else ' ✗'}", ok


def in_target(table: list[dict[str, Any]]) -> dict[str, bool]:
    """Each of :data:`METRICS`' cells of a ``compare`` table: inside the target
    (:func:`_row`'s rule)."""
    by = {r["metric"]: r for r in table}
    return {m: _row(by[m])[1] for m in METRICS}


def p50_errors(table: list[dict[str, Any]]) -> list[float]:
    """The |error| of a ``compare`` table's p50 cells among :data:`METRICS`, in order."""
    by = {r["metric"]: r for r in table}
    return [abs(by[m]["error"]) for m in METRICS if m.startswith("median")]


def _steps(got: dict[str, Any] | None, charge: dict[str, Any] | None = None) -> str:
    """The real runs' steps measured / what the table charges (*charge*,
    :func:`charge_ratios`: decode median (p10–p90), prompt median) or, for a matrix
    stored before item 23, measured / priced by the table's fit terms (*got*,
    :func:`llamacpp_steps.load_ratios`: decode p50 · mean, prompt p50): where a row's
    latency misses come from."""
    if charge and charge["decode"]["steps"]:
        d, pr = charge["decode"], charge["prompt"]
        text = f"{d['median']:.2f} ({d['p10']:.2f}–{d['p90']:.2f})"
        return text + (f", {pr['median']:.2f}" if pr["steps"] else "")
    if not got:
        return "—"
    return f"{got['decode_p50']:.2f} · {got['decode_mean']:.2f}, {got['prompt_p50']:.2f}"


STEPS_HEAD = {
    True: "real steps / what the table charges (`compare --steps`): decode median "
    "(p10–p90), prompt median",
    False: "real steps / the table's fit: decode p50 · mean, with a prompt p50",
}
"""The per-table column's head, by whether the table's loads carry :func:`charge_ratios`."""


def charged(results: dict[str, Any]) -> bool:
    """Every load of every point carries Table 1's :func:`charge_ratios` (a matrix stored
    since item 23, or given them by ``--steps-check``)."""
    return all(v.get("steps_vs_charge") for res in results.values() for v in res["loads"].values())


def _machine(x: dict[str, Any]) -> str:
    """One real run's load average before→after and, for gated runs, the batch-1 step
    the speed probe read before·after it (ms)."""
    text = f"{x['before'].split()[0]}→{x['after'].split()[0]}"
    if "step_before" in x:
        ms = [f"{v:.0f}" if v is not None else "—" for v in (x["step_before"], x["step_after"])]
        text += f" ({'·'.join(ms)} ms)"
    return text


def in_order(results: dict[str, Any]) -> list[tuple[str, Any]]:
    """The stored points in the matrix's order (:data:`CONFIGS` × :data:`REGIMES`), not the
    order they were run in; a point of neither comes last."""
    order = [f"{c}/{r}" for c in CONFIGS for r in REGIMES]
    return sorted(
        results.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)
    )


STEP_BANDS = (0.03, 0.06)
"""How far a load's real decode steps ran from Table 1's charge (|median ratio − 1|) for
:func:`cells_by_steps`: within 3 %, 3–6 %, beyond 6 % (the speed gate's 5 % between)."""


def cells_by_steps(results: dict[str, Any]) -> dict[str, list[int]]:
    """Table 1's cells in target, its cells and its loads, over every load of *results*
    that carries :func:`charge_ratios`, by how far its real decode steps ran from the
    charge (:data:`STEP_BANDS`; empty for a matrix stored without them): do the misses
    follow the host's speed?"""
    lo, hi = STEP_BANDS
    names = (f"within {100 * lo:.0f} %", f"{100 * lo:.0f}–{100 * hi:.0f} %",
             f"beyond {100 * hi:.0f} %")  # fmt: skip
    out: dict[str, list[int]] = {}
    for res in results.values():
        for v in res["loads"].values():
            if not v.get("steps_vs_charge"):
                continue
            off = abs(v["steps_vs_charge"]["decode"]["median"] - 1)
            band = out.setdefault(names[0 if off <= lo else 1 if off <= hi else 2], [0, 0, 0])
            band[0] += sum(in_target(v["table"]).values())
            band[1] += len(METRICS)
            band[2] += 1
    return {k: out[k] for k in names if k in out}


def summary(results: dict[str, Any]) -> list[str]:
    """One row per configuration and length regime: for each table, the cells inside the
    target (of loads × :data:`METRICS`) and the median |error| of the p50s and of
    throughput (the README's fidelity table); last, the real runs' median decode-only step
    over what Table 1 charges for it (:func:`charge_ratios`; a matrix stored before item
    23: over Table 1's fit terms), lowest and highest over the loads: a miss with the
    steps themselves off is in the cost, or the host, not the scheduling."""
    by_charge = charged(results)
    rows = ["| server flags | requests | Table 1 (probes): cells in target | median p50 "
            "error | Table 2 (one load run): cells in target | median p50 error | Table 3 "
            "(probes and one load run): cells in target | median p50 error | real decode "
            f"steps ÷ Table 1's {'charge' if by_charge else 'fit'} |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for key, res in in_order(results):
        cells = [f"`{' '.join(res['flags'])}`", key.split("/")[1]]
        for tables in ({k: v["table"] for k, v in res["loads"].items()}, res["table2"],
                       res.get("table3", {})):  # fmt: skip
            if not tables:
                cells += ["—", "—"]
                continue
            ok = sum(sum(in_target(table).values()) for table in tables.values())
            p50 = [e for table in tables.values() for e in p50_errors(table)]
            cells += [f"{ok} / {len(METRICS) * len(tables)}",
                      f"{100 * float(np.median(p50)):.0f} %"]  # fmt: skip
        ratios = [v["steps_vs_charge"]["decode"]["median"] if by_charge
                  else v["steps_vs_fit"]["decode_p50"] for v in res["loads"].values()
                  if v.get("steps_vs_fit") or by_charge]  # fmt: skip
        cells.append(f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else "—")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def write_section(doc: Path, facts: dict[str, Any], results: dict[str, Any],
                  commands: list[str] | None = None) -> None:  # fmt: skip
    """Put the matrix tables into *doc* between :data:`START` and :data:`END`, and the
    numbers into :data:`PUBLISHED`, with the *commands* that made them (the log
    ``matrix.json`` keeps) when given."""
    PUBLISHED.parent.mkdir(parents=True, exist_ok=True)
    published = {"facts": facts, "results": results}
    if commands is not None:
        published["commands"] = commands
    PUBLISHED.write_text(json.dumps(published, indent=1))
    lines = [START, "", "## The tables", ""]
    lines += [*summary(results), ""]
    lines.append(
        f"Machine: {facts.get('cpu')} ({facts.get('cores')} cores), shared; "
        + (
            f"load average (1/5/15 min) {facts['load_start']} at the start, "
            f"{facts.get('load_end')} at the end; "
            if facts.get("load_start")
            else ""
        )
        + f"{facts.get('repeats')} real runs per point"
        + (f"; wall time {facts['wall_min']} min" if facts.get("wall_min") else "")
        + f"{'; **quick mode**' if facts.get('quick') else ''}"
        + (f". {facts['note']}" if facts.get("note") else "")
        + ". Each cell: simulator error "
        "against the median real run (the real runs' own ± spread); ✗ = outside the target "
        "(throughput 5 %; p50 10 % or the spread, whichever is wider; p90 the spread)."
        + (
            f" Simulated again from the stored profiles and real runs on {facts['resimulated']}"
            " (`validate_cpu.py --matrix --resimulate`: the simulator and the fits of that "
            "day, the real runs of the date above)."
            if facts.get("resimulated")
            else ""
        )
        + (
            (" Run again afterwards" if facts.get("resimulated") else " Each point's run")
            + ", profile and real runs included (`--only`), finished: "
            + ", ".join(
                f"{k} ({results[k].get('finished', '?')})" for k in facts["rerun"] if k in results
            )
            + "."
            if facts.get("rerun")
            else ""
        )
    )
    sep = "|" + "---|" * (len(METRICS) + 3)
    for key, res in in_order(results):
        cfg, reg = key.split("/")
        flags = " ".join(res["flags"])
        for title, tables, ratios, charges in (
            ("Table 1 — calibrated from probes alone", {
                k: v["table"] for k, v in res["loads"].items()},
             {k: v.get("steps_vs_fit") for k, v in res["loads"].items()},
             {k: v.get("steps_vs_charge") for k, v in res["loads"].items()}),
            (f"Table 2 — calibrated on the real runs of {FIT_LOAD}", res["table2"],
             res.get("table2_steps", {}), res.get("table2_charge", {})),
            (f"Table 3 — calibrated on the probes and the real runs of {FIT_LOAD} together",
             res.get("table3", {}), res.get("table3_steps", {}), res.get("table3_charge", {})),
        ):  # fmt: skip
            if not tables:
                continue
            by_charge = all(charges.get(load) for load in tables)
            head = (f"| load | {' | '.join(METRICS)} | {STEPS_HEAD[by_charge]} | load avg "
                    "before→after (step) |")  # fmt: skip
            lines += ["", f"### `{flags}`, {reg} requests: {title}", "", head, sep]
            for load, table in tables.items():
                by = {r["metric"]: r for r in table}
                cells = [_row(by[m])[0] for m in METRICS]
                m = res["loads"][load]["machine"]
                machine = "; ".join(_machine(x) for x in m)
                steps = _steps(ratios.get(load), charges.get(load) if by_charge else None)
                lines.append(f"| {load} | " + " | ".join(cells) + f" | {steps} | {machine} |")
        lines.append("")
        fits = {k: ", ".join(f"{t} {v:.3g}" for t, v in c.items() if v > 1e-9)
                for k, c in res["fits"].items()}  # fmt: skip
        cap = res["capacity_req_s"]
        gate = res.get("gate")
        gated = "" if not gate else (
            f" Profiled at the host's quickest (`validation/speed_gate.py`): the speed probe's "
            f"floor {gate['floor_ms']} ms, {gate.get('probe_after_profile_ms')} ms right after "
            f"the profile ({gate['profile_tries']} profile(s); its own batch-1 rows, at longer "
            f"contexts, {gate['profile_step_ms']} ms); each real run waited for a probe within "
            f"{100 * gate.get('tolerance', speed_gate.GATE):.0f} % of "
            + (f"the profile's typical speed reference, {gate['run_ref_ms']} ms"
               if "speed_reference" in gate else "the floor")
            + " (at most "
            f"{speed_gate.GATE_WAIT_S:.0f} s)."
        )  # fmt: skip
        if gate and gate.get("batch_check"):
            checks = "; ".join(f"{c['profile_ms']} against {c['check_ms']} ms"
                               for c in gate["batch_check"])  # fmt: skip
            gated += (
                f" Its row for the full batch against that step measured right after "
                f"(`full_batch_step`, {len(gate['batch_check'])} profile(s)): {checks}."
            )
        sp = res.get("runs_spells")
        how = ("Table 2 simulates them: `--spells`" if res.get("runs_spells_simulated")
               else "not simulated; `--spells` does")  # fmt: skip
        spells = (f" Slow spells in those runs ({how}): {sp['share']:.0%} of "
                  f"the decode steps at {sp['factor']:.2f}x, {sp['steps']:.1f} steps a spell."
                  if sp else "")  # fmt: skip
        idle = res.get("idle")
        idled = "" if not idle else (
            " Lone prompts, by the server's idle time before them: the engine's prompt time "
            "less the probe's (`validation/llamacpp_idle.py`): " + "; ".join(
                f"{name} {n}{'' if ex is None else f' at {ex:+.1f} ms'}" for name, n, ex in idle
            ) + "."
        )  # fmt: skip
        wake = res.get("wake")
        woke = "" if not wake else (
            f" The profile's wake probe (Table 1 charges it, `cost.wake: fitted`): "
            f"{wake['ms']:.1f} ms on the first step after {wake['after_s']:g} s idle "
            f"({wake['prompts']} lone prompts, {wake['back_to_back_ms']:.1f} ms back to back)."
        )  # fmt: skip
        lines.append(f"Capacity (simulated, {cfg}): {cap:.3f} req/s. Fit from probes: "
                     f"{fits['probes']}. Fit on runs: {fits['runs']}."
                     + (f" Fit on both: {fits['joint']}." if "joint" in fits else "")
                     + f"{spells}{gated}{idled}{woke}")  # fmt: skip
    lines += ["", END]
    text = doc.read_text() if doc.is_file() else ""
    if START in text and END in text:
        text = text[: text.index(START)] + "\n".join(lines) + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    doc.write_text(text)
