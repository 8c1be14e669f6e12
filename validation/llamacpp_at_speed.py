"""Table 1 at the host's speed during each load: how many of its misses that speed explains.

Table 1 prices every load by a profile taken minutes before the load's real runs; on this
host those runs' decode steps then ran up to ~10 % off what Table 1 charges for them
(``compare --steps``: ``validate_cpu.py --matrix --summary``'s last column). This script
takes each stored point's Table 1 scenarios again with every step cost multiplied by
that load's own median ratio of real decode steps to the charge
(:func:`at_speed_scenario`: ``cost.speed``, which scales the fit's coefficients, decode
residuals and wake; the scenario's request path), simulates them and compares them with
the same real runs, cell by cell under issue 12's target.

That is not a prediction: it reads one number from the runs it is compared with. It is an
attribution. A cell it puts in target that Table 1 misses was missed for the host's speed
between the profile and the runs; a cell it still misses is the model's (its scheduling,
its prompt costs, the shape of its step times) or the runs' own noise.

``--ratio gate`` takes instead what was known before the runs started: the speed gate's
last lone-decode probe before each run over the profile's typical speed reference (the
mean over the load's runs; :func:`gate_ratio`). That is a prediction a user could make:
time one lone request just before the load, and price the profile at that speed.
``--ratio gate-all`` takes the median of every probe the gate took before a run, not its
last (:func:`gate_all_ratio`, item 40): the last is the one the gate let through.
``--ratio batch`` is the same with the full batch's decode step timed right before each
run (:func:`batch_ratio`; a matrix run with ``--batch-before``), ``--ratio batch-mean``
with that check's mean step instead of its median (:func:`batch_mean_ratio`, item 40).
``--ratio mean`` is ``runs`` with the load's *mean* real decode step over the charge
instead of its median (:func:`runs_mean_ratio`; an attribution too): how much of what is
left is the steps' skew, the slow steps a median leaves out and a request's TPOT sums.
``--ratio speed`` and ``--ratio speed-batch`` take what ``lyra-simpy speed`` itself printed
right before each run, its lone reading and ``--batch NP`` (:func:`speed_ratio`; a
matrix run with ``--speed-before``, item 42): the user's path, not the gate's probes.
``--ratio one-run`` prices every load at the mean step of one load's runs
(:func:`one_run_ratio`: the load Tables 2 and 3 fit on): what a user with the profile and
one load run of their own gets from ``compare --steps``' ``cost.speed``, a prediction for
the other loads.
``--ratio phase`` is ``runs`` with the steps that hold prompt tokens priced at their own
median ratio (:func:`prompt_ratio`, ``cost.prompt_speed``) and the decode-only steps at
theirs (an attribution, item 70): on a shared host the two need not move together, and
one speed for both leaves the gap between them in the cells. ``--ratio one-run-phase``
is ``one-run`` the same way (:func:`one_run_prompt_ratio`): ``compare --steps`` on one
load run prints both speeds, a prediction for the other loads. ``--ratio speed-phase`` is
``speed-batch`` with the prompt steps at what ``lyra-simpy speed --prompt N`` printed
before each run (:func:`speed_prompt_ratio`; a matrix run with ``--speed-before``, item
71 on): both phases read before the load, a prediction. ``--ratio speed-beside`` is the
same with the prompt read beside the full batch's other decoders (``--prompt N --beside
NP-1``, :func:`speed_beside_ratio`, item 75 on): the kind of step a load's prompts run in.
``--ratio speed-lone-beside`` takes that prompt reading with the lone decode reading
(``speed``'s) for the decode steps instead of the full batch's (item 77): over five points
the lone reading alone did better than the full batch's (items 75–76). ``--ratio
speed-beside-fit`` is ``speed-beside`` with the prompt reading taken against what Table 1's
fit charges for the profile rows it was read against instead of the rows themselves
(:func:`beside_rows_over_fit`, an ablation, item 77): ``cost.prompt_speed`` multiplies the
fit's price, so a reading against rows the fit misses carries that miss. ``--ratio
speed-beside-rows`` takes it against the profile's rows of the pair instead of the beside
reading's own reference (:func:`beside_reference_over_rows`, an ablation, item 81): the
same as ``speed-beside`` where the reading was taken against the rows (items 75–77).
``--ratio speed-beside-median`` is ``speed-beside`` with each run priced at the median of
every reading of the point up to the one right before it (:func:`_running_median`, item
83): a forecast from the host's level so far rather than its last moment.

    PYTHONPATH=src python validation/llamacpp_at_speed.py
        [--ratio runs|mean|gate|gate-all|batch|batch-mean|speed|speed-batch|one-run|phase
                 |one-run-phase|speed-phase|speed-beside|speed-lone-beside
                 |speed-beside-fit|speed-beside-rows|speed-beside-median]
        [--only CFG/REGIME ...] [--json OUT] [--per-run]

After the table it prints how far the speed it priced each load at lay from the load's
mean real decode step (:func:`against_mean`: bias and spread of the log over the loads),
and for a ratio with a prompt speed of its own how far that lay from the runs' prompt
steps, point by point (:func:`prompt_against_runs`);
for a reading taken before each run, how much those readings stray within a load
(:func:`readings_spread`) and how the same readings fare taken right *after* each run
(:func:`read_after`); and how far each load's mean step lies from its point's own level
(:func:`point_level`), what no one speed for a point can follow (item 43).
``--per-run`` prints instead each run's beside reading against its own prompt steps
(:func:`prompt_by_run`, item 81).

It reads what ``validate_cpu.py --matrix`` left in ``results/validation-llamacpp`` (each
point's ``fit_probes.yaml``, Table 1 scenarios, real runs and ``matrix.json``'s
``steps_vs_charge``); no server. It writes ``at_speed_RATIO/`` beside each point's files.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import yaml
from llamacpp_points import (
    FIT_LOAD,
    LOADS,
    METRICS,
    OUT,
    in_target,
    p50_errors,
    point_folder,
    point_repeats,
    real_runs,
    run_order,
    runs_here,
)
from lyra_cli import run, sim_folder


def at_speed_scenario(scenario: dict[str, Any], ratio: float, fit: Path | None = None,
                      prompt: float | None = None) -> dict[str, Any]:  # fmt: skip
    """*scenario* (a Table 1 scenario's YAML) with every step cost its fit prices ×
    *ratio* (``cost.speed``: the terms, the decode residuals, the fitted wake) and its
    request path's milliseconds × *ratio* too (the host runs the HTTP threads as well).
    The noise, wander and spells are relative (σ of a log ratio, factors): left as
    they are. *fit*: priced by that fit file (the point's own, wherever its folder now
    lies; the stored scenario names the one where it ran) instead of the one it names.
    *prompt*: the steps with prompt tokens priced × that instead (``cost.prompt_speed``)."""
    for name, got in (("ratio", ratio), ("prompt", ratio if prompt is None else prompt)):
        if not (np.isfinite(got) and got > 0):
            raise ValueError(f"{name}: got {got!r}, must be a positive number")
    out = copy.deepcopy(scenario)
    out["cost"]["speed"] = ratio
    if prompt is not None:
        out["cost"]["prompt_speed"] = prompt
    if fit is not None:
        out["cost"]["path"] = str(fit)
    work = out["workload"]
    if work.get("request_path_ms"):
        work["request_path_ms"] = round(work["request_path_ms"] * ratio, 3)
    return out


def cells(table: list[dict[str, Any]]) -> dict[str, Any]:
    """A compare table's cells under issue 12's target (the matrix's
    :func:`~llamacpp_points.in_target`): how many meet it, which miss, and the p50 cells'
    |error|."""
    ok = in_target(table)
    return {
        "in_target": sum(ok.values()),
        "missed": [m for m, inside in ok.items() if not inside],
        "p50_errors": [round(e, 4) for e in p50_errors(table)],
    }


def runs_ratio(res: dict[str, Any], load: str) -> float:
    """The median of *load*'s real decode steps over Table 1's charge for them
    (``compare --steps``, the matrix's ``steps_vs_charge``)."""
    return float(res["loads"][load]["steps_vs_charge"]["decode"]["median"])


def runs_mean_ratio(res: dict[str, Any], load: str) -> float:
    """The mean of *load*'s real decode steps over Table 1's charge for them (the same
    ``steps_vs_charge``): a request's TPOT is the mean of its steps, not their median, so
    a right-skewed step time (a few slow steps) moves it by the gap between the two."""
    return float(res["loads"][load]["steps_vs_charge"]["decode"]["mean"])


def prompt_ratio(res: dict[str, Any], load: str) -> float:
    """The median of *load*'s real steps with prompt tokens over Table 1's charge for them
    (the same ``steps_vs_charge``)."""
    return float(res["loads"][load]["steps_vs_charge"]["prompt"]["median"])


def one_run_prompt_ratio(res: dict[str, Any], load: str) -> float:
    """For every load, :data:`~llamacpp_points.FIT_LOAD`'s mean real step with prompt
    tokens over Table 1's charge: the ``cost.prompt_speed`` ``compare --steps`` prints
    for one load run (:func:`one_run_ratio`'s companion)."""
    return float(res["loads"][FIT_LOAD]["steps_vs_charge"]["prompt"]["mean"])


def one_run_ratio(res: dict[str, Any], load: str) -> float:
    """For every load, :data:`~llamacpp_points.FIT_LOAD`'s (the load Tables 2 and 3 fit
    on) mean real decode step over Table 1's charge: what ``compare --steps`` on one load
    run prints as ``cost.speed``, used to predict every load (a prediction from the
    probes and one run, as Table 3's; the fitted load itself is in-sample)."""
    return runs_mean_ratio(res, FIT_LOAD)


def _before_over(res: dict[str, Any], load: str, field: str, ref: str | None,
                 missing: str) -> float:  # fmt: skip
    """The mean over *load*'s real runs of their record's *field* (the median of each run's
    where it holds several readings) over the point's ``gate[ref]`` (*ref* None: the field
    is a ratio already, ``lyra-simpy speed``'s ``cost.speed``); *missing* says what the
    matrix lacked when either is not there."""
    before = [float(np.median(m[field])) for m in res["loads"][load]["machine"] if m.get(field)]
    if (ref is not None and not res["gate"].get(ref)) or not before:
        raise SystemExit(f"{load} has {missing}")
    return float(np.mean(before)) / (1.0 if ref is None else float(res["gate"][ref]))


def gate_ratio(res: dict[str, Any], load: str) -> float:
    """The mean over *load*'s real runs of the speed gate's last probe before each
    (``step_before``) over the step the gate held the runs to (``gate.run_ref_ms``: the
    profile's typical speed reference, ``--speed-reference``)."""
    return _before_over(res, load, "step_before", "run_ref_ms",
                        "no speed reference or gate probes for --ratio gate (run the matrix "
                        "with --speed-reference record)")  # fmt: skip


def gate_all_ratio(res: dict[str, Any], load: str) -> float:
    """:func:`gate_ratio` with the median of *every* reading the gate took before each run
    (``gate_readings``, kept since item 40) instead of its last: the last is the one that
    came within the gate, so where the host ran quicker or slower than the profile's
    reference it reads the reference, not the host."""
    return _before_over(res, load, "gate_readings", "run_ref_ms",
                        "no gate readings for --ratio gate-all (run the matrix with "
                        "--speed-reference record, item 40 on)")  # fmt: skip


def batch_ratio(res: dict[str, Any], load: str) -> float:
    """The mean over *load*'s real runs of the full batch's decode step timed right before
    each (``batch_before``, ``validate_cpu.py --matrix --batch-before``) over the
    profile's row for it (``gate.batch_row_ms``)."""
    return _before_over(res, load, "batch_before", "batch_row_ms",
                        "no full-batch step before its runs for --ratio batch (run the "
                        "matrix with --batch-before)")  # fmt: skip


def batch_mean_ratio(res: dict[str, Any], load: str) -> float:
    """:func:`batch_ratio` with the check's *mean* step (``batch_before_mean``, the mean
    of its lock-step windows, kept since item 40) over the profile's row: a request's TPOT
    is the mean of its steps, so does the check's mean forecast the runs' mean step
    (``--ratio mean``) where its median forecast their median?"""
    return _before_over(res, load, "batch_before_mean", "batch_row_ms",
                        "no full-batch mean step before its runs for --ratio batch-mean "
                        "(run the matrix with --batch-before, item 40 on)")  # fmt: skip


_NO_SPEED = (
    "no `lyra-simpy speed` reading before its runs for --ratio {} (run the matrix "
    "with --speed-before)"
)


def speed_ratio(res: dict[str, Any], load: str) -> float:
    """The mean over *load*'s real runs of what ``lyra-simpy speed`` (its lone reading:
    the profile's reference request, the median step over the profile's) printed right
    before each (``speed_lone``, ``validate_cpu.py --matrix --speed-before``, item 42):
    Table 1 as a user runs it, ``profile`` → ``calibrate`` → ``speed`` → ``run --set
    cost.speed=…``."""
    return _before_over(res, load, "speed_lone", None, _NO_SPEED.format("speed"))


def speed_batch_ratio(res: dict[str, Any], load: str) -> float:
    """:func:`speed_ratio` with ``lyra-simpy speed --batch NP`` (``speed_batch``: the full
    batch's lock-step mean step over the profile's one-pass row)."""
    return _before_over(res, load, "speed_batch", None, _NO_SPEED.format("speed-batch"))


def speed_prompt_ratio(res: dict[str, Any], load: str) -> float:
    """The mean over *load*'s real runs of what ``lyra-simpy speed --prompt N`` printed
    right before each (``speed_prompt``: lone prompts over the profile's row, item 71)."""
    return _before_over(res, load, "speed_prompt", None,
                        "no `lyra-simpy speed --prompt` reading before its runs for --ratio "
                        "speed-phase (run the matrix with --speed-before, item 71 on)")  # fmt: skip


def speed_beside_ratio(res: dict[str, Any], load: str) -> float:
    """The mean over *load*'s real runs of what ``lyra-simpy speed --prompt N --beside
    NP-1`` printed right before each (``speed_beside``: a prompt beside the full batch's
    other decoders over the profile's mixed rows, item 75)."""
    return _before_over(res, load, "speed_beside", None,
                        "no `lyra-simpy speed --prompt N --beside B` reading before its runs "
                        "for --ratio speed-beside (run the matrix with --speed-before, item "
                        "75 on)")  # fmt: skip


def _beside_rows(here: Path) -> tuple[float, float, float]:
    """What ``lyra-simpy speed --prompt N --beside B`` read the point in folder *here*
    against (its first beside reading's ``profile_ms``, ``speed/LOAD/run1-beside.json``:
    the profile's mixed rows of the pair, or since item 78 its own beside reference), the
    pair's rows as measured and what the probe fit (``fit_probes.yaml``, Table 1's)
    charges for them: for each decoder context the rows of the prompt's *N* tokens beside
    *B* were taken at, summed (the prompt's steps), their median over the contexts, as the
    reading takes its rows'."""
    from llamacpp_steps import priced_mixed_rows

    found = sorted((here / "speed").glob("*/run1-beside.json"))
    if not found:
        raise SystemExit(f"{here.name}: no beside reading kept under speed/ (item 75 on)")
    reading = json.loads(found[0].read_text())
    beside, tokens = int(reading["request"]["beside"]), int(reading["request"]["contexts"][0])
    sums: dict[int, np.ndarray] = {}
    for (b, n, _), rows in priced_mixed_rows(here).items():
        if (b, n) != (beside, tokens):
            continue
        for ctx, ms, fit_ms in rows:
            sums[ctx] = sums.get(ctx, np.zeros(2)) + np.array((ms, fit_ms))
    if not sums:
        raise SystemExit(f"{here.name}: no mixed rows of {tokens} tokens beside {beside}")
    measured, fitted = np.median(list(sums.values()), axis=0)
    return float(reading["profile_ms"]), float(measured), float(fitted)


def beside_rows_over_fit(here: Path) -> float:
    """What the beside reading of the point in folder *here* was read against over what
    its probe fit charges for the pair's rows (:func:`_beside_rows`). Times the reading,
    it gives the prompt steps' speed against the fit's price, which ``cost.prompt_speed``
    multiplies."""
    against, _, fitted = _beside_rows(here)
    return against / fitted


def beside_reference_over_rows(here: Path) -> float:
    """What the beside reading of the point in folder *here* was read against over the
    pair's rows as the profile measured them (:func:`_beside_rows`): 1 where the reading
    was taken against those rows (items 75–77); since item 78 its own reference over the
    rows. Times the reading, it gives the prompt steps' speed against the rows the fit is
    fitted on (item 81: which yardstick, when reference and rows disagree)."""
    against, measured, _ = _beside_rows(here)
    return against / measured


def folder(here: Path, source: str) -> Path:
    """Where :func:`point` writes a point's scenarios, fits and simulations at the speed
    *source* gives (``llamacpp_noise.py --at-speed`` reads ``runs``')."""
    return here / f"at_speed_{source}"


class Ratio(NamedTuple):
    """One way to read a load's speed: the function that reads it from a stored point,
    the report's head for the ratios and for the cells at that speed."""

    read: Callable[[dict[str, Any], str], float]
    head: str
    at: str
    field: str | None = None
    """The run record's field it reads before each run (None: read from the runs)."""
    prompt: Callable[[dict[str, Any], str], float] | None = None
    """Where the steps with prompt tokens get a speed of their own (``cost.prompt_speed``),
    the function that reads it (None: every step at :attr:`read`'s)."""
    prompt_scale: Callable[[Path], float] | None = None
    """A factor on :attr:`prompt`'s reading from the point's folder (None: none)."""


def _running_median(res: dict[str, Any], load: str, field: str, missing: str) -> float:
    """The mean over *load*'s real runs of the median of every reading of *field* the
    point took up to and including the one right before that run (each run's own median
    where it holds several), the runs in the order they ran (:func:`run_order`): what a user
    who kept every ``lyra-simpy speed`` reading since the profile could price the next run
    at. Item 82 found that median nearer the next two minutes' speed than the last reading
    on a host that wandered (3.1–3.8 % against 6.9–8.6 % off); in the matrix's cells it
    held fewer than the last reading on both hosts it was tried on (item 83: it lags a
    host that moves and stays)."""
    seen: list[float] = []
    at: list[float] = []
    for name, k in run_order(res):
        m = res["loads"][name]["machine"][k]
        if m.get(field):
            seen.append(float(np.median(m[field])))
        if name == load and seen:
            at.append(float(np.median(seen)))
    if not at:
        raise SystemExit(f"{load} has {missing}")
    return float(np.mean(at))


def speed_batch_median_ratio(res: dict[str, Any], load: str) -> float:
    """:func:`speed_batch_ratio` with the running median of the point's ``--batch NP``
    readings so far (:func:`_running_median`) instead of each run's own."""
    return _running_median(res, load, "speed_batch", _NO_SPEED.format("speed-beside-median"))


def speed_beside_median_ratio(res: dict[str, Any], load: str) -> float:
    """:func:`speed_beside_ratio` with the running median of the point's beside readings
    so far (:func:`_running_median`)."""
    return _running_median(res, load, "speed_beside",
                           "no `lyra-simpy speed --prompt N --beside B` reading before its "
                           "runs for --ratio speed-beside-median (run the matrix with "
                           "--speed-before, item 75 on)")  # fmt: skip


RATIOS = {
    "runs": Ratio(runs_ratio, "real decode steps ÷ Table 1's charge", "at the runs' speed"),
    "mean": Ratio(
        runs_mean_ratio, "real decode steps' mean ÷ Table 1's charge", "at the runs' mean step"
    ),
    "gate": Ratio(
        gate_ratio,
        "gate probes before the runs ÷ the profile's",
        "at the gate's speed",
        "step_before",
    ),
    "gate-all": Ratio(
        gate_all_ratio,
        "all gate probes before the runs ÷ the profile's",
        "at their speed",
        "gate_readings",
    ),
    "batch": Ratio(
        batch_ratio,
        "full-batch steps before the runs ÷ the profile's row",
        "at that speed",
        "batch_before",
    ),
    "batch-mean": Ratio(
        batch_mean_ratio,
        "full-batch mean steps before the runs ÷ the profile's row",
        "at that speed",
        "batch_before_mean",
    ),
    "speed": Ratio(
        speed_ratio,
        "`lyra-simpy speed` before the runs (lone)",
        "at the speed it printed",
        "speed_lone",
    ),
    "speed-batch": Ratio(
        speed_batch_ratio,
        "`lyra-simpy speed --batch NP` before the runs",
        "at the speed it printed",
        "speed_batch",
    ),
    "one-run": Ratio(
        one_run_ratio,
        f"{FIT_LOAD}'s real mean decode step ÷ Table 1's charge",
        "at that run's speed",
    ),
    "phase": Ratio(
        runs_ratio,
        "real decode steps ÷ Table 1's charge (prompt steps at their own)",
        "at the runs' speed per phase",
        prompt=prompt_ratio,
    ),
    "speed-phase": Ratio(
        speed_batch_ratio,
        "`lyra-simpy speed --batch NP` and `--prompt N` before the runs",
        "at the speeds it printed",
        "speed_batch",
        prompt=speed_prompt_ratio,
    ),
    "speed-beside": Ratio(
        speed_batch_ratio,
        "`lyra-simpy speed --batch NP` and `--prompt N --beside NP-1` before the runs",
        "at the speeds it printed",
        "speed_batch",
        prompt=speed_beside_ratio,
    ),
    "speed-lone-beside": Ratio(
        speed_ratio,
        "`lyra-simpy speed` (lone) and `--prompt N --beside NP-1` before the runs",
        "at the speeds it printed",
        "speed_lone",
        prompt=speed_beside_ratio,
    ),
    "speed-beside-fit": Ratio(
        speed_batch_ratio,
        "`lyra-simpy speed --batch NP` and `--prompt N --beside NP-1` (against the fit) "
        "before the runs",
        "at the speeds it printed",
        "speed_batch",
        prompt=speed_beside_ratio,
        prompt_scale=beside_rows_over_fit,
    ),
    "speed-beside-rows": Ratio(
        speed_batch_ratio,
        "`lyra-simpy speed --batch NP` and `--prompt N --beside NP-1` (against the rows) "
        "before the runs",
        "at the speeds it printed",
        "speed_batch",
        prompt=speed_beside_ratio,
        prompt_scale=beside_reference_over_rows,
    ),
    "speed-beside-median": Ratio(
        speed_batch_median_ratio,
        "the running median of `lyra-simpy speed --batch NP` and `--prompt N --beside NP-1` "
        "readings up to each run",
        "at the speeds they printed",
        "speed_batch",
        prompt=speed_beside_median_ratio,
    ),
    "one-run-phase": Ratio(
        one_run_ratio,
        f"{FIT_LOAD}'s real mean decode step ÷ Table 1's charge (prompt steps at their own)",
        "at that run's speed per phase",
        prompt=one_run_prompt_ratio,
    ),
}
"""``--ratio``'s choices."""


def point(key: str, res: dict[str, Any], repeats: int, log: list[str],
          source: str = "runs") -> dict[str, Any]:  # fmt: skip
    """Every load of the stored point *key* at the host's speed (*source*, one of
    :data:`RATIOS`: the runs' own decode steps, the gate's lone probes or the full batch's
    step before them): per load the ratio, and Table 1's cells and those of the
    simulation at that speed (:func:`cells`)."""
    here = point_folder(key, OUT)
    work = folder(here, source)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    loads: dict[str, Any] = {}
    for load in LOADS:
        got = res["loads"][load]
        ratio = RATIOS[source].read(res, load)
        reader, scale = RATIOS[source].prompt, RATIOS[source].prompt_scale
        prompt = reader(res, load) if reader is not None else None
        if prompt is not None and scale is not None:
            prompt *= scale(here)
        scenario = yaml.safe_load((here / f"{load}.yaml").read_text())
        path = work / f"{load}.yaml"
        moved = at_speed_scenario(scenario, ratio, here / "fit_probes.yaml", prompt)
        path.write_text(yaml.safe_dump(moved))
        run("run", str(path), "--out", str(work / "sim"), "--no-figures", log=log)
        table_file = work / f"{load}_compare.json"
        run("compare", str(sim_folder(work / "sim" / load)), *real_runs(here, load, repeats),
            "--json", str(table_file), log=log)  # fmt: skip
        table = json.loads(table_file.read_text())
        loads[load] = {"ratio": round(ratio, 4), "table1": cells(got["table"]),
                       "at_speed": cells(table)}  # fmt: skip
        if prompt is not None:
            loads[load]["prompt_ratio"] = round(prompt, 4)
    return loads


def report(points: dict[str, dict[str, Any]], source: str = "runs") -> list[str]:
    """The table this script prints: per point the loads' ratios, Table 1's cells in
    target and median p50 error against the same at that speed, and the totals."""
    ratio, at = RATIOS[source].head, RATIOS[source].at
    lines = [
        f"| point | {ratio} | Table 1: cells in target | median p50 error "
        f"| {at}: cells in target | median p50 error |",
        "|---|---|---:|---:|---:|---:|",
    ]
    totals = {"table1": 0, "at_speed": 0}
    for key, loads in points.items():
        row = [key, ", ".join(f"{v['ratio']:.2f}" + (f"/{v['prompt_ratio']:.2f}"
                                                       if "prompt_ratio" in v else "")
                              for v in loads.values())]  # fmt: skip
        for table in totals:
            ok = sum(v[table]["in_target"] for v in loads.values())
            p50 = np.median([e for v in loads.values() for e in v[table]["p50_errors"]])
            totals[table] += ok
            row += [f"{ok} / {len(METRICS) * len(loads)}", f"{100 * p50:.0f} %"]
        lines.append("| " + " | ".join(row) + " |")
    n = len(METRICS) * sum(len(loads) for loads in points.values())
    lines.append(f"| all | | {totals['table1']} / {n} | | {totals['at_speed']} / {n} | |")
    return lines


def against_mean(points: dict[str, dict[str, Any]], results: dict[str, Any]
                 ) -> tuple[float, float]:  # fmt: skip
    """How far the speed each load of *points* (:func:`point`'s, one ratio's) was priced
    at lay from that load's mean real decode step over the charge (:func:`runs_mean_ratio`
    of the stored *results*): the mean and the standard deviation over the loads of the
    log of the one over the other. For a ratio read before the runs, its bias and how far
    it strays as a forecast of the step a request's TPOT sums."""
    logs = [np.log(v["ratio"] / runs_mean_ratio(results[p], load))
            for p, loads in points.items() for load, v in loads.items()]  # fmt: skip
    return float(np.mean(logs)), float(np.std(logs))


def prompt_against_runs(points: dict[str, dict[str, Any]], results: dict[str, Any]
                        ) -> dict[str, tuple[float, float]]:  # fmt: skip
    """For a ratio that prices the prompt steps at a speed of their own, how far that
    speed (each load's ``prompt_ratio``) lay from the load's real steps with prompt tokens
    over their charge (:func:`prompt_ratio` of the stored *results*): per point, the mean
    and the standard deviation over its loads of the log of the one over the other. A
    reading's bias at a point and how far it strays about it (item 75)."""
    out = {}
    for p, loads in points.items():
        logs = [np.log(v["prompt_ratio"] / prompt_ratio(results[p], load))
                for load, v in loads.items()]  # fmt: skip
        out[p] = (float(np.mean(logs)), float(np.std(logs)))
    return out


def readings_spread(results: dict[str, Any], points: list[str], field: str
                    ) -> tuple[float, int]:  # fmt: skip
    """How much the reading *field* taken before each run (each run's median where it
    holds several) strays between the runs of one load of *points*: the pooled standard
    deviation of its log within a load, and the readings it was taken over. On a host
    whose speed holds through a load's minutes that is the reading's own noise, and a
    load's mean of *n* readings carries about this over √n of it into the forecast
    (item 43)."""
    squares, dof, n = 0.0, 0, 0
    for key in points:
        for load in results[key]["loads"].values():
            got = [np.log(float(np.median(m[field]))) for m in load["machine"] if m.get(field)]
            if len(got) > 1:
                squares += float(np.sum((np.array(got) - np.mean(got)) ** 2))
                dof, n = dof + len(got) - 1, n + len(got)
    return (float(np.sqrt(squares / dof)) if dof else float("nan")), n


def read_after(res: dict[str, Any], field: str) -> dict[str, Any]:
    """The stored point *res* with each run's reading *field* replaced by the next run's
    in the order they ran (:func:`~llamacpp_points.run_order`): the reading taken right
    after each run. The point's last run gets
    none. Read by a ratio, it asks whether the miss is the host moving during the run
    (then the reading after is no worse than the one before, and the two together
    better) or a gap that neither side of the run shows (item 43)."""
    out = copy.deepcopy(res)
    runs = [out["loads"][load]["machine"][k] for load, k in run_order(out)]
    for m, after in zip(runs, [*(m.get(field) for m in runs[1:]), None], strict=True):
        m[field] = after
    return out


def point_level(results: dict[str, Any], points: list[str]) -> float:
    """How far each load's mean real decode step over the charge (:func:`runs_mean_ratio`)
    lies from its point's own level, the geometric mean over the point's loads: the
    standard deviation of the log over the loads of *points*. Known only after the runs,
    it bounds what any one speed for a whole point can do, however it is read: what the
    host's minutes move from one load to the next (item 43)."""
    logs: list[float] = []
    for key in points:
        got = np.log([runs_mean_ratio(results[key], load) for load in LOADS])
        logs += list(got - got.mean())
    return float(np.std(logs))


def prompt_by_run(key: str, res: dict[str, Any], repeats: int
                  ) -> list[tuple[str, int, float, float]]:  # fmt: skip
    """Each real run of the stored point *key*, in the matrix's order: its load, its number,
    the beside reading taken right before it (``speed_beside``) and the median of its own
    steps with prompt tokens over Table 1's charge (``compare RUN RUN --steps LOAD.yaml``
    on that run alone). A load's ``steps_vs_charge`` pools its runs; run by run, it asks
    whether a reading forecasts the run it was taken for, or only the host's level around
    it (item 81: ``-np 4`` long's readings fell in two bands)."""
    from lyra_simpy.live.stepcheck import step_check
    from lyra_simpy.scenario import load_scenario

    here = point_folder(key, OUT)
    out = []
    for load in LOADS:
        scenario = load_scenario(here / f"{load}.yaml")
        machine = res["loads"][load]["machine"]
        for k, run_dir in enumerate(real_runs(here, load, repeats), 1):
            if not machine[k - 1].get("speed_beside"):
                raise SystemExit(f"{key}: run {k} of {load} has no beside reading (item 75 on)")
            steps = step_check(scenario, [Path(run_dir)])["prompt"]["median"]
            out.append((load, k, float(machine[k - 1]["speed_beside"]), float(steps)))
    return out


def by_run_lines(key: str, runs: list[tuple[str, int, float, float]]) -> list[str]:
    """:func:`prompt_by_run`'s table for the point *key*, and the correlation over its runs
    of each reading with its own run's prompt steps."""
    lines = [f"{key}: each run's beside reading and its own prompt steps ÷ Table 1's charge",
             "| load | run | beside reading | prompt steps |", "|---|---:|---:|---:|"]  # fmt: skip
    lines += [f"| {load} | {k} | {r:.3f} | {s:.3f} |" for load, k, r, s in runs]
    got = np.array([(r, s) for _, _, r, s in runs])
    corr = float(np.corrcoef(got[:, 0], got[:, 1])[0, 1])
    lines.append(f"correlation over the {len(runs)} runs: {corr:.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="llamacpp_at_speed.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--only", nargs="+", metavar="CFG/REGIME", default=None,
                        help="stored points to take (default: each with real runs)")  # fmt: skip
    parser.add_argument("--ratio", choices=list(RATIOS), default="runs",
                        help="the speed: the runs' decode steps over the charge, their "
                        "median or mean (an attribution), or the gate's probes or the "
                        "full batch's step before them (a prediction); phase, one-run-phase: "
                        "the steps with a prompt at their own")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, metavar="OUT",
                        help="also write every load's figures here")  # fmt: skip
    parser.add_argument("--per-run", action="store_true",
                        help="print each run's beside reading against its own prompt steps "
                        "instead (no simulation)")  # fmt: skip
    args = parser.parse_args(argv)
    stored = OUT / "matrix.json"
    if not stored.is_file():
        raise SystemExit(f"{stored}: not found (run validate_cpu.py --matrix first)")
    keep = json.loads(stored.read_text())
    results = keep.get("results", {})
    have = [k for k in results if runs_here(OUT, k)]
    missing = [k for k in args.only or [] if k not in have]
    if missing:
        raise SystemExit(f"--only: no stored runs of {missing[0]!r}; stored: {have}")
    if args.per_run:
        for k in args.only or have:
            runs = prompt_by_run(k, results[k], point_repeats(results[k], keep["facts"]["repeats"]))
            print("\n".join(by_run_lines(k, runs)))
        return 0
    for k in args.only or have:  # every point can be read at that speed, before any runs
        for load in LOADS:
            try:
                RATIOS[args.ratio].read(results[k], load)
                if (prompt := RATIOS[args.ratio].prompt) is not None:
                    prompt(results[k], load)
            except SystemExit as exc:
                raise SystemExit(f"{k}: {exc}; --only takes the points that have it") from None
    log: list[str] = []
    points = {k: point(k, results[k], point_repeats(results[k], keep["facts"]["repeats"]), log,
                       args.ratio)
              for k in (args.only or have)}  # fmt: skip
    print("\n" + "\n".join(report(points, args.ratio)))
    bias, spread = against_mean(points, results)
    print(f"against the runs' mean decode step (log, over the loads): bias {100 * bias:+.1f} %, "
          f"spread {100 * spread:.1f} %")  # fmt: skip
    if RATIOS[args.ratio].prompt is not None:
        per = [f"{p} bias {100 * b:+.1f} %, spread {100 * s:.1f} %"
               for p, (b, s) in prompt_against_runs(points, results).items()]  # fmt: skip
        print("the prompt steps' speed against the runs' median prompt step (log, over a "
              "point's loads): " + "; ".join(per))  # fmt: skip
    if field := RATIOS[args.ratio].field:
        noise, n = readings_spread(results, list(points), field)
        print(f"the {n} readings ({field}) within a load: spread {100 * noise:.1f} % (log, "
              f"pooled)")  # fmt: skip
        read = RATIOS[args.ratio].read
        after = {}
        for k in points:
            moved = read_after(results[k], field)
            after[k] = {load: {"ratio": read(moved, load)} for load in LOADS}
        bias, spread = against_mean(after, results)
        print(f"the same readings taken right after each run (the next run's): bias "
              f"{100 * bias:+.1f} %, spread {100 * spread:.1f} %")  # fmt: skip
    print(f"each load's mean step about its point's own level (the geometric mean over the "
          f"point's loads, known after the runs): spread "
          f"{100 * point_level(results, list(points)):.1f} %")  # fmt: skip
    if args.json is not None:
        out = {"ratio": args.ratio, "points": points, "commands": log}
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
