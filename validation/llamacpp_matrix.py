"""``python validation/validate_cpu.py --matrix``: the ``llamacpp`` engine model against a
real ``llama-server`` over server configurations × length regimes × loads (issue 12).

For each server configuration of :data:`~llamacpp_points.CONFIGS` (launched as a user
would: llama.cpp's defaults for every flag not listed) and each length regime of
:data:`~llamacpp_points.REGIMES`:

1. start the server, ``lyra-simpy profile`` it when the host runs at its quickest
   (:mod:`speed_gate`; slots pinned, the extra columns ``steps``/``passes``/
   ``checkpoints``/``attention_cells``; :mod:`lyra_simpy.live.profile`), check its row
   for ``-np`` sequences against that step measured right after and profile again while
   it is off (:func:`full_batch_step`, :func:`speed_gate.batch_checked`), and
   ``calibrate`` it with the robust ``soft_l1`` loss (Table 1's fit: probes alone);
2. simulate a closed loop of ``-np`` clients to get the capacity, then every load of
   :data:`~llamacpp_points.LOADS` (Poisson at 0.3/0.6/0.9 of it, closed loops of 4 and
   8): simulate, replay :data:`~llamacpp_points.REPEATS` times on the server, each once
   a lone request decodes within ``speed_gate.GATE`` of the profile's speed (the load
   average and that step read before and after each real run), compare (median of the
   real runs, their spread);
3. Table 2: ``calibrate --from-runs`` on the real runs of the medium Poisson load alone
   (:func:`llamacpp_tables.table2`, loss ``calibrate --from-runs``'s own default,
   ``fitruns.RUNS_LOSS``, named in each command), then simulate every load again with that fit
   and compare to the same real runs; Table 3: the same with the profile and those runs
   fitted together.

The scenarios are written from :func:`llamacpp_points.scenario` into the results
folder: ``engine: {name: llamacpp, command: ...}`` with the launch flags, so the preset
sets every knob.
``LYRA_QUICK=1``: the default configuration and the short regime only, fewer requests.
``--only default/short ...`` runs those points again (say, one disturbed by other work on
the machine) and keeps the others; ``--table2`` redoes Tables 2 and 3 of every stored
point from its real runs (no server); ``--resimulate`` refits every stored point's profile
(giving it the ``attention_cells`` column it lacks) and redoes every table from the
stored real runs (no server; with ``--only``, those points); ``--doc-only`` rewrites
the document from the numbers.
Run it with ``tox -e validate-cpu -- --matrix`` (or ``python validation/validate_cpu.py
--matrix``).
Numbers go to ``results/validation-llamacpp/matrix.json``;
:func:`llamacpp_report.write_section` puts the tables into ``docs/VALIDATION-llamacpp.md``
between markers. The matrix's definition (points, metrics, target, scenarios) is
:mod:`llamacpp_points`; its tables from stored runs :mod:`llamacpp_tables`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import speed_gate
from llamacpp_points import (
    CONFIGS,
    DOC,
    EXTRA_BODY,
    FILL_TOKENS,
    LOADS,
    OUT,
    PUBLISHED,
    REGIMES,
    REPEATS,
    REQUEST_PATH_CPU_SHARE,
    ROOT,
    fill_prompts,
    point_folder,
    point_repeats,
    prompt_seed,
    real_runs,
    run_rounds,
    runs_here,
    scenario,
)
from llamacpp_report import cells_by_steps, summary, write_section
from llamacpp_steps import load_ratios
from llamacpp_tables import (
    charge_ratios,
    profile_hardware,
    resimulate,
    steps_check,
    table2,
    with_idle,
)
from lyra_cli import run, sim_folder

from lyra_simpy.calibration.profiles import request_path_ms
from lyra_simpy.errors import LyraError
from lyra_simpy.live import llamacpp
from lyra_simpy.machine import cpu_model, load_average

BATCH_BEFORE = False
"""``--batch-before``: :func:`full_batch_steps` once more right before each real run (the
gate passed), kept as the run's ``batch_before`` (its median) and ``batch_before_mean``
(its mean, item 40) beside the profile's full-batch row (``gate.batch_row_ms``): does
the host's step under load, read just before a run, forecast the run's steps better than
the gate's lone probe does, which item 34 found no forecast
(``validation/llamacpp_at_speed.py --ratio batch`` and ``--ratio batch-mean``)?"""
SPEED_BEFORE = False
"""``--speed-before``: ``lyra-simpy speed`` itself, as a user types it, right before each
real run (the gate passed): the lone reading (the profile's reference request,
:data:`SPEED_PROBES` probes) and ``--batch NP`` (the server's full batch,
:data:`SPEED_BATCH_ROUNDS` rounds), both :data:`SPEED_PAUSE_S` apart, each kept as the
run's ``speed_lone`` and ``speed_batch`` (the ``cost.speed`` it printed) and its JSON as
``speed/LOAD/runK-lone.json`` and ``…-batch.json`` (out of ``real/``, whose every
``run*`` the step rebuild reads as a run): Table 1 at the speed a
user reads before a load (``validation/llamacpp_at_speed.py --ratio speed`` and
``--ratio speed-batch``, item 42). Since item 71 also ``--prompt N`` (:data:`SPEED_PROBES`
lone prompts of the middle size of the profile's lone prompts,
:func:`reading_prompt_tokens`), kept as ``speed_prompt`` (the ``cost.prompt_speed`` it
printed) and ``…-prompt.json``: the prompt steps' speed, which on item 68-70's host
drifted apart from the decode steps' (``--ratio speed-phase``). Since item 75 also
``--prompt N --beside NP-1`` (:data:`SPEED_BATCH_ROUNDS` rounds over the grid's mixed contexts
of the profile's largest mixed prompt, :func:`reading_beside_tokens`), kept as
``speed_beside`` and ``…-beside.json``: a prompt beside the full batch's other decoders,
the kind of step a load's prompts run in (``--ratio speed-beside``)."""
SPEED_PROBES = 3
"""``lyra-simpy speed --probes`` for :data:`SPEED_BEFORE`'s lone reading: fewer than the
command's 6 so that fifteen readings a point add minutes, not half an hour
(``--speed-probes N`` sets it and :data:`SPEED_BATCH_ROUNDS`; item 43 took 6)."""
SPEED_BATCH_ROUNDS = 2
"""``lyra-simpy speed --batch NP --probes`` for :data:`SPEED_BEFORE`: rounds over the
grid's two decode contexts, four lock-step decodes a reading (``--speed-probes``)."""
SPEED_PAUSE_S = 2.0
"""``lyra-simpy speed --pause-s`` for :data:`SPEED_BEFORE` (the command's default is 5)."""
DECODE_STEP: str | None = None
"""``--decode-step`` when points run: the profiles' ``grid.decode_step`` (None: the
profiler's default, the median chunk gap). ``mean`` prices each decode row by its
lock-step window's mean step, the median over its rounds (item 43: on two stored sets
that gave Table 1 7–8 cells more; item 44, run so against new loads at two points: no
cell either way)."""
GATE_AFTER = 0
"""Times a real run is taken again when the speed probe right after it is outside the gate
(``--gate-after N``; :func:`speed_gate.gated_run`); 0: the gate holds before a run only."""
SPEED_REFERENCE: str | None = None
"""``--speed-reference MODE``: a lone decode timed beside every profile measurement
(``grid.speed_reference``: ``record``, or ``scale`` to price each measurement against
it), one profile a point (not retried until the host runs at its floor), and the real
runs gated on the profile's typical reference step instead of the floor."""
HOST_NOISE_S = 0.0
"""``--host-noise SECONDS``: ``validation/host_noise.py SECONDS`` (a fixed piece of CPU
work timed every 0.5 s) right before each point's server starts, its figures kept as the
point's ``host_noise`` and its JSON as ``host_noise.json`` (item 60: how slow the host was
before a point, read with nothing else running); 0: not run."""
SETTLE = False
"""``--settle``: right before each real run (after the gate and ``--speed-before``), one
request per slot (:func:`settle_slots`), so that the run starts with no slot holding a
probe's state, and with the slots' order of release a fresh server's. llama-server
copies a slot's state into its prompt cache when it gives the slot a new request, and
every idle slot's after it (``tools/server/server-context.cpp``: ``get_available_slot`` →
``server_slot::prompt_save``, ``--cache-idle-slots``); the probes before a run leave
states of hundreds of tokens in the slots at the long points, and the run's first request
waited 68–166 ms for their copies (item 67, ``validation/llamacpp_lone_wait.py
--first``), which Table 1, whose slots start empty, does not charge. Kept as the run's
``settled`` (the slots that answered, in order)."""
FILL = False
"""``--fill``: each profile ends by filling the server's prompt cache to ``--cache-ram``
and taking the prompt-cache probe again (``grid.save_fill_prompts``, item 87), so that
the real runs meet a full cache, as on a server that has run a while, and Table 1
charges each save by the memory it copies into (``llamacpp_points.filled``). About six
minutes a profile on the matrix's CPU."""
SETTLE_TOKENS = 4
"""Prompt tokens of each :data:`SETTLE` request (fresh random ids, as the probes draw
them), and one output: a state of a few tokens, whose copy costs the save's intercept."""
_SETTLE_IDS = np.random.default_rng()
"""Fresh prompt ids each process: none cached, none shared with a run's prompts."""


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
        "split_decode_batch": [3] if slots >= 4 else [],
        "prefill_together": sorted({2, slots}) if slots >= 2 else [],
        "sliding_window": True,
        "repeats": 3,
        "extra_body": {"cache_prompt": False},
        "wander_s": WANDER_S,
        "wake_gaps_s": WAKE_GAPS_S,
        **({"speed_reference": SPEED_REFERENCE} if SPEED_REFERENCE else {}),
        # the beside reading's own reference through the profile (item 77): the pair
        # speed_before's beside reading sends, NP-1 decoders and the longest mixed prompt
        **({"speed_reference_beside": [slots - 1, hi]} if SPEED_REFERENCE and slots > 1 else {}),
        **({"decode_step": DECODE_STEP} if DECODE_STEP else {}),
        **({"save_fill_prompts": fill_prompts(), "save_fill_tokens": FILL_TOKENS} if FILL else {}),
    }


BATCH_CHECK_ROUNDS = 3
"""Rounds of the full-batch check (:func:`full_batch_step`), each over the grid's decode
contexts, :data:`BATCH_CHECK_PAUSE_S` apart."""
BATCH_CHECK_PAUSE_S = 5.0


def full_batch_steps(url: str, grid_file: Path, slots: int) -> tuple[float | None, float | None]:
    """The step of *slots* sequences decoding together right now, as the profile measures
    its rows (:meth:`~lyra_simpy.live.prober.Prober.decode`: slots 0..slots-1 pinned, the
    grid's decode contexts and steps, fresh prompt ids), read two ways over
    :data:`BATCH_CHECK_ROUNDS` rounds over those contexts: the median of the rounds' steps
    as the profile reads its rows (the grid's ``decode_step``), and the mean of their
    lock-step windows' mean steps (a request's TPOT is the mean of its steps: does the
    check's mean forecast the runs' mean step, ``llamacpp_at_speed.py --ratio
    batch-mean``?). None where none answered."""
    from lyra_simpy.live.prober import Prober
    from lyra_simpy.live.profile_grid import load_grid
    from lyra_simpy.live.speed import decode_rounds

    grid = load_grid(grid_file)
    prober = Prober.for_endpoint(url, "openai", grid, int(np.random.default_rng().integers(2**62)))
    prober.pin = True
    got: list[tuple[float, float]] = []  # kept as they come: a failed request ends the rounds
    try:
        decode_rounds(prober, slots, grid.decode_context, BATCH_CHECK_ROUNDS, BATCH_CHECK_PAUSE_S,
                      lambda _k, _ctx, gap, mean: got.append((gap, mean)))  # fmt: skip
    except LyraError as exc:  # the check reads what answered before it (profile again)
        print(f"full-batch check failed: {exc}", flush=True)
    read = [mean if grid.decode_step == "mean" else gap for gap, mean in got]
    steps = [s for s in read if np.isfinite(s)]
    means = [mean for _, mean in got if np.isfinite(mean)]
    return (float(np.median(steps)) if steps else None,
            float(np.mean(means)) if means else None)  # fmt: skip


def full_batch_step(url: str, grid_file: Path, slots: int) -> float | None:
    """:func:`full_batch_steps`' median step, as the profile reads its rows (None when none
    answered; :func:`speed_gate.batch_checked` compares it with the profile's row)."""
    return full_batch_steps(url, grid_file, slots)[0]


def speed_probe(url: str) -> float | None:
    """The server's batch-1 decode step right now, the prompt not cached
    (:func:`speed_gate.lone_decode_step`)."""
    return speed_gate.lone_decode_step(url, {"cache_prompt": False})


def reading_prompt_tokens(profile_csv: Path) -> int:
    """The prompt :data:`SPEED_BEFORE`'s prompt reading sends: the middle size of the
    profile's lone prompts (the lower of the two middle ones: 200 of a long point's 4, 8,
    200, 300, 400 and 800, its checkpoint probes' short rows among them)."""
    from lyra_simpy.live.speed_prompt import lone_prompt_sizes

    sizes = lone_prompt_sizes(profile_csv)
    if not sizes:
        raise SystemExit(f"{profile_csv}: no lone prompt rows for --speed-before's prompt reading")
    return sizes[(len(sizes) - 1) // 2]


def reading_beside_tokens(profile_csv: Path, beside: int) -> int | None:
    """The prompt :data:`SPEED_BEFORE`'s reading beside *beside* decoders sends: the
    largest the profile has a mixed row of beside them (None: none)."""
    from lyra_simpy.live.speed_prompt import mixed_pairs

    return max((n for b, n in mixed_pairs(profile_csv) if b == beside), default=None)


def speed_before(url: str, here: Path, folder: Path, slots: int, log: list[str]
                 ) -> dict[str, float | None]:  # fmt: skip
    """:data:`SPEED_BEFORE`'s readings of the server at *url* against the point's
    profile (``lyra-simpy speed``: the lone one, ``--batch`` *slots*, ``--prompt``, and
    ``--prompt --beside`` *slots* − 1 where the profile has such a mixed row), each's JSON
    in ``speed/LOAD/`` under the point's folder *here* (*folder*: the run's, whose name it
    takes): the ``cost.speed`` each printed, None where it failed (the run goes on, and
    ``llamacpp_at_speed.py`` leaves the reading out of the load's mean)."""
    got: dict[str, float | None] = {}
    keep = here / "speed" / folder.parent.name
    keep.mkdir(parents=True, exist_ok=True)
    readings = {"lone": ["--probes", str(SPEED_PROBES)],
                "batch": ["--batch", str(slots), "--probes", str(SPEED_BATCH_ROUNDS)],
                "prompt": ["--prompt", str(reading_prompt_tokens(here / "profile.csv")),
                           "--probes", str(SPEED_PROBES)]}  # fmt: skip
    beside = reading_beside_tokens(here / "profile.csv", slots - 1) if slots > 1 else None
    if beside is not None:
        readings["beside"] = ["--prompt", str(beside), "--beside", str(slots - 1),
                              "--probes", str(SPEED_BATCH_ROUNDS)]  # fmt: skip
    for name, extra in readings.items():
        out = keep / f"{folder.name}-{name}.json"
        out.unlink(missing_ok=True)
        run("speed", str(here / "profile.csv"), "--endpoint", url, "--grid",
            str(here / "grid.yaml"), *extra, "--pause-s", str(SPEED_PAUSE_S), "--json",
            str(out), log=log, ok=(0, 1, 2), url=url)  # fmt: skip
        got[f"speed_{name}"] = json.loads(out.read_text())["speed"] if out.is_file() else None
    return got


def settle_slots(url: str, slots: int) -> list[int]:
    """:data:`SETTLE`'s requests to the server at *url*: one request of
    :data:`SETTLE_TOKENS` fresh prompt tokens and one output to each of its *slots* slots,
    pinned (``id_slot``), one after another from the highest id down. The first one's
    launch copies every idle slot's state into the prompt cache; each then leaves its slot
    a few tokens. The slots are released highest id first, so the next request takes the
    highest id, then the next lower, as on a server never used (``get_available_slot``:
    least recently released first, never used highest id first), which is the order the
    simulator starts from. Returns the slots that answered (``id_slot``); one missing
    still holds what it held (the run goes on, and the record shows it)."""
    import httpx

    done: list[int] = []
    for slot in range(slots - 1, -1, -1):
        prompt = _SETTLE_IDS.integers(1000, 30000, size=SETTLE_TOKENS).tolist()
        body = {"prompt": prompt, "n_predict": 1, "cache_prompt": False, "id_slot": slot}
        try:
            reply = httpx.post(f"{url}/completion", json=body, timeout=120).json()
            done.append(int(reply["id_slot"]))
        except (httpx.HTTPError, KeyError, TypeError, ValueError):
            continue
    return done


def host_noise(here: Path, seconds: float, log: list[str]) -> dict[str, Any]:
    """``validation/host_noise.py SECONDS --json here/host_noise.json`` in a process of its
    own (its BLAS on one thread, as when run by hand), the command appended to *log*; its
    figures without the times."""
    out = here / "host_noise.json"
    script = Path(__file__).resolve().with_name("host_noise.py")
    args = [str(script), f"{seconds:g}", "--json", str(out)]
    log.append("python " + " ".join(args).replace(f"{ROOT}/", ""))
    print(f"\n$ {log[-1]}", flush=True)
    if subprocess.run([sys.executable, *args]).returncode:
        raise SystemExit(f"validate-cpu --matrix: `{log[-1]}` failed")
    got = json.loads(out.read_text())
    return {k: v for k, v in got.items() if k != "times_ms"}


def point(cfg: str, reg: str, quick: bool, log: list[str]) -> dict[str, Any]:
    """Profile, calibrate, simulate, replay and compare one (configuration, regime)."""
    flags, regime = CONFIGS[cfg], REGIMES[reg]
    here = OUT / f"{cfg}_{reg}"
    here.mkdir(parents=True, exist_ok=True)
    (here / "grid.yaml").write_text(yaml.safe_dump(grid(flags, regime)))
    binary, model = llamacpp.server_binary(), llamacpp.model_file()
    out: dict[str, Any] = {"flags": flags, "loads": {}, "table2": {}, "fits": {}}
    if HOST_NOISE_S:
        out["host_noise"] = host_noise(here, HOST_NOISE_S, log)
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
            if SPEED_BEFORE:  # (after the gate, right before the run: the user's path)
                record.update(speed_before(srv.url, here, folder, slots, log))
            if BATCH_BEFORE:  # (after the gate, right before the run)
                record["batch_before"], record["batch_before_mean"] = full_batch_steps(
                    srv.url, here / "grid.yaml", slots)  # fmt: skip
            if SETTLE:  # (last: nothing between it and the run's first request)
                record["settled"] = settle_slots(srv.url, slots)
            seed = prompt_seed(scenario_file.stem, folder.name)  # (item 84)
            run("replay", str(scenario_file), "--endpoint", srv.url, "--out", str(folder),
                "--timeout-s", "300", "--time-limit-s", "1200", "--extra-body", EXTRA_BODY,
                "--prompt-seed", str(seed), log=log)  # fmt: skip

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
        out["hardware"] = profile_hardware(here)
        run("calibrate", str(prof), "--out", str(fit), "--loss", "soft_l1", log=log)
        # capacity: every slot always busy (a closed loop of -np clients)
        cap_raw = scenario("capacity", flags, regime, quick, str(fit), "closed_4", None)
        cap_raw["workload"]["arrival"]["concurrency"] = int(flags[flags.index("-np") + 1])
        cap_file = here / "capacity.yaml"
        cap_file.write_text(yaml.safe_dump(cap_raw))
        run("run", str(cap_file), "--out", str(here / "capacity"), "--no-figures", log=log)
        capacity = json.loads((sim_folder(here / "capacity" / "capacity") / "summary.json")
                              .read_text())["request_throughput"]  # fmt: skip
        out["capacity_req_s"] = capacity
        out["request_path_ms"] = request_path_ms(here / "profile.csv")  # (item 18)
        paths = {load: here / f"{load}.yaml" for load in LOADS}
        for load, path in paths.items():
            raw = scenario(load, flags, regime, quick, str(fit), load, capacity)
            path.write_text(yaml.safe_dump(raw))
            run("run", str(path), "--out", str(here / "sim"), "--no-figures", log=log)

        def one(load: str, k: int) -> dict[str, Any]:
            before, batch = load_average(), {}
            got = speed_gate.gated_run(probe, ref_ms,
                                       functools.partial(replay, paths[load], record=batch),
                                       Path(real_runs(here, load, REPEATS)[k]),
                                       "validate-cpu --matrix", GATE_AFTER)  # fmt: skip
            return {"before": before, "after": load_average(), **got, **batch}

        out["run_order"], machines = run_rounds(REPEATS, one)  # (item 86: round by round)
        for load, path in paths.items():
            runs, loads = real_runs(here, load, REPEATS), machines[load]
            table = here / f"{load}_compare.json"
            run("compare", str(sim_folder(here / "sim" / load)), *runs, "--json", str(table),
                log=log)  # fmt: skip
            out["loads"][load] = {"table": json.loads(table.read_text()), "machine": loads,
                                  "steps_vs_fit": load_ratios(here, load, "probes"),
                                  "steps_vs_charge": charge_ratios(here, path, load)}  # fmt: skip
    table2(cfg, reg, quick, out, REPEATS, log)
    out["fits"]["probes"] = yaml.safe_load(fit.read_text())["coefficients"]
    with_idle(here, out)
    return out


def stored_points(keep: dict[str, Any], only: list[str] | None, flag: str = "--resimulate"
                  ) -> list[tuple[str, dict[str, Any]]]:  # fmt: skip
    """The stored points (key, result) of *keep* that *only* names (all without it); a
    name not stored is one line naming the stored ones, and exit status 1. So is a point
    whose profile and real runs are not in ``results/validation-llamacpp`` (they stay on
    the machine that ran them: a fresh clone holds only ``matrix.json``'s tables), checked
    for every point before any is simulated again, so that nothing is half rewritten."""
    stored = keep.get("results", {})
    missing = [p for p in only or [] if p not in stored]
    if missing:
        raise SystemExit(f"--only: no stored point {missing[0]!r}; stored: {list(stored)}")
    chosen = [(k, v) for k, v in stored.items() if not only or k in only]
    here = [k for k, _ in chosen if runs_here(OUT, k)]
    absent = [k for k, _ in chosen if k not in here]
    if absent:
        folder = point_folder(absent[0], OUT)
        raise SystemExit(
            f"{flag}: point {absent[0]!r} has no profile and real runs in {folder} (they stay "
            "where the matrix ran them); points here: "
            f"{[k for k in stored if runs_here(OUT, k)]}; run it again with --only {absent[0]}"
        )
    return chosen


def main(argv: list[str] | None = None) -> int:
    """Run the matrix (``--only CFG/REGIME ...``: those points again, kept beside the
    others in ``matrix.json``; ``--doc-only``: rewrite the document from it)."""
    global SPEED_REFERENCE, GATE_AFTER, BATCH_BEFORE, SPEED_BEFORE, HOST_NOISE_S
    global SPEED_PROBES, SPEED_BATCH_ROUNDS, DECODE_STEP, SETTLE, FILL
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
    parser.add_argument("--decode-step", choices=["median", "mean"], default=None,
                        help="the profiles' decode rows: the probes' median chunk gap "
                        "(the profiler's default) or their lock-step window's mean step "
                        "(grid.decode_step); with --resimulate, price the stored profiles' "
                        "rows by that column (default: as profiled)")  # fmt: skip
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
    parser.add_argument("--save-price", type=float, default=None, metavar="MS",
                        help="with --resimulate: Table 1's prompt-cache save at MS a token "
                             "instead of the profile's probe's (an ablation, item 74)")  # fmt: skip
    parser.add_argument("--kv-layout", choices=["placed", "packed"], default=None,
                        help="with --resimulate: Table 1's scheduler.kv_layout (default "
                        "the scheduler's, placed; packed: item 47's Table 1, -kvu's cells "
                        "counted as one block a sequence; an ablation)")  # fmt: skip
    parser.add_argument("--speed-reference", choices=["record", "scale"], default=None,
                        help="profile with a speed reference beside each measurement "
                        "(scale: each priced against it) and gate the runs on its typical "
                        "step (kept per point)")  # fmt: skip
    parser.add_argument("--batch-before", action="store_true",
                        help="time the full batch's decode step right before each real run "
                        "(kept as batch_before; llamacpp_at_speed.py --ratio batch)")  # fmt: skip
    parser.add_argument("--speed-before", action="store_true",
                        help="run `lyra-simpy speed` (lone, --batch NP, --prompt N, --prompt "
                        "N --beside NP-1) right "
                        "before each real run (kept as speed_lone, speed_batch, "
                        "speed_prompt and speed_beside; llamacpp_at_speed.py --ratio speed, "
                        "speed-batch, speed-phase, speed-beside)")  # fmt: skip
    parser.add_argument("--speed-probes", type=int, default=None, metavar="N",
                        help="with --speed-before: the readings' --probes (default "
                        f"{SPEED_PROBES} lone steps and prompts, {SPEED_BATCH_ROUNDS} rounds "
                        "of the full batch; the command's own is 6)")  # fmt: skip
    parser.add_argument("--settle", action="store_true",
                        help="right before each real run, one request of a few tokens to "
                        "each slot, highest id first, so that no slot holds a probe's state "
                        "when the run starts (kept as each run's settled)")  # fmt: skip
    parser.add_argument("--fill", action="store_true",
                        help="end each profile by filling the server's prompt cache and "
                        "taking its probe again, so that the real runs meet a full cache "
                        "and Table 1 prices saves into its memory (item 87)")  # fmt: skip
    parser.add_argument("--host-noise", type=float, default=0.0, metavar="SECONDS",
                        help="time a fixed piece of CPU work for SECONDS before each "
                        "point's server starts (validation/host_noise.py), kept with the "
                        "point")  # fmt: skip
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
    SPEED_REFERENCE = args.speed_reference
    BATCH_BEFORE = args.batch_before
    SPEED_BEFORE = args.speed_before
    GATE_AFTER = args.gate_after
    SETTLE = args.settle
    FILL = args.fill
    if args.host_noise < 0:
        raise SystemExit(f"--host-noise: got {args.host_noise:g}, must be 0 (off) or more")
    HOST_NOISE_S = args.host_noise
    DECODE_STEP = args.decode_step
    if args.save_price is not None and (not args.resimulate or not args.save_price >= 0):
        raise SystemExit(f"--save-price: got {args.save_price:g}, must be 0 or more, and "
                         "only with --resimulate")  # fmt: skip
    if args.speed_probes is not None:
        if not args.speed_before or args.speed_probes < 1:
            raise SystemExit(f"--speed-probes: got {args.speed_probes}, must be 1 or more "
                             "and given with --speed-before")  # fmt: skip
        SPEED_PROBES = SPEED_BATCH_ROUNDS = args.speed_probes
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
            repeats = point_repeats(res, keep["facts"]["repeats"])
            resimulate(key, res, repeats, log, args.decode_step,
                       args.unscaled, args.path_cpu_share, not args.no_wake,
                       args.kv_layout, args.save_price)  # fmt: skip
            table2(cfg, reg, keep["facts"]["quick"], res, repeats, log,
                   args.spells)  # fmt: skip
            with_idle(OUT / f"{cfg}_{reg}", res)
        keep["facts"]["resimulated"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        stored.write_text(json.dumps({**keep, "commands": log}, indent=1))
        write_section(DOC, keep["facts"], keep["results"], log)
        return 0
    if args.steps_check:
        for key, res in stored_points(keep, args.only, "--steps-check"):
            steps_check(key, res)
        stored.write_text(json.dumps(keep, indent=1))
        write_section(DOC, keep["facts"], keep["results"], keep.get("commands"))
        return 0
    if args.table2:
        log = keep.get("commands", [])
        for key, res in keep["results"].items():
            cfg, reg = key.split("/")
            table2(cfg, reg, keep["facts"]["quick"], res,
                   point_repeats(res, keep["facts"]["repeats"]), log, args.spells)  # fmt: skip
        stored.write_text(json.dumps({**keep, "commands": log}, indent=1))
    if args.doc_only or args.table2:
        for key, res in keep.get("results", {}).items():
            with_idle(point_folder(key, OUT), res)
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
