"""How often issue 12's target holds for a prediction that is itself a real run: the floor.

The target compares one simulated value with the median of a point's three real runs:
a p90 must lie within the runs' own spread (the farthest run from their median), a p50
within that or 10 %, the throughput within 5 % (:func:`llamacpp_points.cell`). The
simulator replays the runs' requests without noise, but the host adds its own: how often
would a prediction with no model error at all pass? Run a point with more repeats
(``LYRA_VALIDATE_REPEATS=6 python validation/validate_cpu.py --matrix --only CFG/REG``,
then in the point's folder ``for l in real/*; do mkdir -p floor/${l#real/}; mv $l/run[4-9]
floor/${l#real/}/; done`` and ``--resimulate --only CFG/REG``, which compares with three)
and this script reads them back: for every three of a load's runs as "the real runs"
(median and spread, as the matrix takes them) it scores

* **one other run** as the prediction — a model as right as the host's next run, noise
  included;
* **the median of the runs left** — nearer what a model without noise aims at (with six
  runs, the other three's median);
* **Table 1's simulated value** (the point's ``sim/LOAD``) — the engine model itself,
  against the same triples.

Each as the share of cells inside the target, by metric kind (throughput, p50s, p90s).
:func:`normal_floor` gives the same two floors for Gaussian runs: one draw against three
lands within the farthest of them from their median 63 % of the time, their exact mean
85 %.

    PYTHONPATH=src python validation/llamacpp_floor.py results/validation-llamacpp/CFG_REG
        [--json OUT]

It reads the point's ``real/LOAD/runK/summary.json``, the runs beyond the matrix's three
moved to ``floor/LOAD/runK`` (so that the tables and ``compare --steps``, which read
``real/``, take the first three as at every point), and ``sim/LOAD/*/summary.json``;
no server, no simulation.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llamacpp_points import LOADS, METRICS, cell, every_run

from lyra_simpy.live.compare import compare_row


def kind(metric: str) -> str:
    """The metric's kind in the target: ``throughput``, ``p50`` or ``p90``."""
    if metric == "output_throughput":
        return "throughput"
    return "p50" if metric.startswith("median") else "p90"


def scored(value: float, runs: list[float], metric: str) -> bool:
    """*value* inside the target against *runs* (``compare``'s row for them)."""
    return cell(compare_row(metric, value, runs))[1]


def floor(values: list[float], sim: float, metric: str) -> dict[str, list[bool]]:
    """Every triple of *values* (one load's runs of one metric) as the real runs, scored
    against each other run, the median of the runs left, and *sim*."""
    out: dict[str, list[bool]] = {"one run": [], "median of the rest": [], "table 1": []}
    for triple in itertools.combinations(range(len(values)), 3):
        runs = [values[i] for i in triple]
        rest = [values[i] for i in range(len(values)) if i not in triple]
        out["one run"] += [scored(v, runs, metric) for v in rest]
        out["median of the rest"].append(scored(float(np.median(rest)), runs, metric))
        out["table 1"].append(scored(sim, runs, metric))
    return out


def point_floor(here: Path) -> dict[str, Any]:
    """:func:`floor` over every load and metric of the point in *here*: per predictor and
    metric kind, the share of scored cells inside the target (``inside``) and how many
    were scored (``cells``), and the runs per load."""
    tally: dict[str, dict[str, list[bool]]] = {}
    repeats = {}
    for load in LOADS:
        folders = every_run(here, load)
        if len(folders) < 4:
            raise SystemExit(f"{here / 'real' / load}: {len(folders)} runs; the floor needs 4 "
                             "or more (LYRA_VALIDATE_REPEATS=6)")  # fmt: skip
        repeats[load] = len(folders)
        reals = [json.loads((f / "summary.json").read_text()) for f in folders]
        sim = json.loads(next((here / "sim" / load).glob("*/summary.json")).read_text())
        for metric in METRICS:
            got = floor([float(r[metric]) for r in reals], float(sim[metric]), metric)
            for who, hits in got.items():
                tally.setdefault(who, {}).setdefault(kind(metric), []).extend(hits)
    shares = {who: {k: round(float(np.mean(v)), 3) for k, v in by.items()}
              for who, by in tally.items()}  # fmt: skip
    scored = {who: {k: len(v) for k, v in by.items()} for who, by in tally.items()}
    return {"repeats": repeats, "inside": shares, "cells": scored}


def normal_floor(draws: int = 200_000, seed: int = 0) -> dict[str, float]:
    """The two floors for Gaussian runs: the share of draws inside the p90 rule (within the
    farthest of three runs from their median) for a fourth run, and for the exact mean."""
    rng = np.random.default_rng(seed)
    runs = rng.normal(size=(draws, 3))
    med = np.median(runs, axis=1)
    far = np.abs(runs - med[:, None]).max(axis=1)
    return {"one run": round(float(np.mean(np.abs(rng.normal(size=draws) - med) <= far)), 3),
            "exact mean": round(float(np.mean(np.abs(med) <= far)), 3)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("point", type=Path, help="results/validation-llamacpp/CFG_REG")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    got = point_floor(args.point)
    got["normal"] = normal_floor()
    print(f"{args.point}: runs per load {sorted(set(got['repeats'].values()))}")
    for who, by in got["inside"].items():
        print(f"  {who:>20}: " + ", ".join(f"{k} {100 * v:.0f} %" for k, v in by.items()))
    print(
        f"  Gaussian runs, p90 rule: one run {100 * got['normal']['one run']:.0f} %, "
        f"the exact mean {100 * got['normal']['exact mean']:.0f} %"
    )
    if args.json:
        args.json.write_text(json.dumps(got, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
