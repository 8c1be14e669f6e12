"""Does step-time noise close the llama.cpp matrix's misses? Each table again, predicted by
the median of N noise draws instead of one noiseless run.

Most cells the matrix misses are p90s a few per cent low, which a simulator without
step-time noise could miss by construction: a queue waits longer behind steps that
vary. This reads what ``validate_cpu.py --matrix`` left in
``results/validation-llamacpp`` (no server), gives every stored scenario — each table's
(``LOAD.yaml``, ``LOAD_t2.yaml``, ``LOAD_t3.yaml``) — the step-time noise its fit found
(``cost.jitter: {sigma: fitted}``, :mod:`lyra_simpy.cost.jitter`; ``--sigma X`` for one
value everywhere), simulates it under ``--draws`` noise draws
(:func:`lyra_simpy.live.band.band`) and prints, per point and table, the cells inside the
target as stored (one noiseless run) and with the draws' median as the prediction, and
how many real values lie inside the draws' band, and how wide the bands are (the median
over the cells of their width over the real value), and how much the draws differ from
one another against how much the real repeats do. ``--wander`` gives each table the
host's wander its fit found instead (``cost.jitter: {wander: fitted}``): Tables 2 and 3
from their runs, Table 1 from the profile's wander probe where it has one (the matrix's
profiles since item 32). ``--session`` adds to each draw a whole run's factor
(``cost.jitter.session_cv: fitted``: how far the host's speed moved between stretches of
the profile as long as a load run, read from its speed references; Tables 1 and 3, whose
fits hold a profile — refit them first with ``validate_cpu.py --matrix --resimulate``
and ``--table2``). ``--at-speed`` takes Table 1 at the runs' own speed instead
(the scenarios ``validation/llamacpp_at_speed.py`` left in each point's
``at_speed_runs/``; Tables 2 and 3 are left out): what the noise adds to the engine
model priced at the speed the host ran (item 34). ``--at-speed RATIO`` takes the
scenarios of ``llamacpp_at_speed.py --ratio RATIO`` (``at_speed_RATIO/``) instead: with
a speed read before the runs (``gate-all``, ``batch-mean``) and the wander the profile's
probe read, Table 1 is a user's whole path from probes (``lyra-simpy speed``, then the
scenario with ``cost.jitter: {wander: fitted}``; item 42).

    PYTHONPATH=src python validation/llamacpp_noise.py [--draws 9] [--sigma X | --wander]
        [--session] [--at-speed [RATIO]] [CFG/REGIME ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import llamacpp_at_speed as at_speed
from llamacpp_points import METRICS, OUT, cell, point_folder

from lyra_simpy.live.band import band, inside
from lyra_simpy.scenario import load_scenario

TABLES = (("", "loads"), ("_t2", "table2"), ("_t3", "table3"))
"""Each table's scenario suffix and where the stored matrix keeps its comparisons."""


def tables_of(res: dict[str, Any]) -> list[dict[str, list[dict[str, Any]]]]:
    """A stored point's three tables: load → its comparison rows."""
    return [
        {k: v["table"] for k, v in res["loads"].items()},
        res.get("table2", {}),
        res.get("table3", {}),
    ]


def score(table: list[dict[str, Any]], got: dict[str, dict[str, Any]]) -> tuple[int, int, int]:
    """(cells in target as stored, with the draws' median as the prediction, real values
    inside the draws' band) of one load's *table*, the band *got* per metric."""
    by = {r["metric"]: r for r in table}
    stored = moved = within = 0
    for m in METRICS:
        row = by[m]
        stored += cell(row)[1]
        median = got[m]["median"]
        moved += cell({**row, "sim": median, "error": median / row["real"] - 1.0})[1]
        within += bool(inside(row["real"], got[m]))
    return stored, moved, within


def has_fitted(scenario: Any, field: str) -> bool:
    """Whether *scenario*'s cost model has a fit with ``noise.<field>`` in it (``wander``:
    the host's wander; ``session``: its speed between minutes)."""
    noise = getattr(getattr(scenario.cost, "fit", None), "noise", None)
    return getattr(noise, field, None) is not None


def widths(table: list[dict[str, Any]], got: dict[str, dict[str, Any]]) -> list[float]:
    """Each cell's band width (high − low) over its real value, of one load's *table*:
    how wide a band holds what it holds."""
    by = {r["metric"]: r for r in table}
    return [(got[m]["high"] - got[m]["low"]) / by[m]["real"] for m in METRICS if by[m]["real"]]


def spreads(table: list[dict[str, Any]], got: dict[str, dict[str, Any]]
            ) -> list[tuple[float, float]]:  # fmt: skip
    """Each cell's (real repeats', draws') standard deviation over their mean, of one
    load's *table*: do the simulated runs differ from one another as the real ones do?"""
    by = {r["metric"]: r for r in table}
    out = []
    for m in METRICS:
        real = [float(v) for v in by[m].get("runs", [])]
        sims = [float(v) for v in got[m]["values"] if v is not None]
        if len(real) > 1 and len(sims) > 1 and statistics.mean(real) and statistics.mean(sims):
            out.append((statistics.stdev(real) / statistics.mean(real),
                        statistics.stdev(sims) / statistics.mean(sims)))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points", nargs="*", help="e.g. default/short (default: every one)")
    ap.add_argument("--draws", type=int, default=9)
    ap.add_argument("--sigma", type=float, default=None,
                    help="this sigma everywhere (default: each fit's, sigma: fitted)")  # fmt: skip
    ap.add_argument("--wander", action="store_true",
                    help="the host's wander the runs' fit found (wander: fitted) instead of "
                    "sigma; a table whose fit has none (a profile without the wander "
                    "probe) is left out")  # fmt: skip
    ap.add_argument("--session", action="store_true",
                    help="besides, each draw a whole run's factor by the CV the profile's "
                    "speed references show (session_cv: fitted); a table whose fit has none "
                    "(runs alone, or a profile without speed references) is left out")  # fmt: skip
    ap.add_argument(
        "--at-speed",
        nargs="?",
        const="runs",
        default=None,
        choices=sorted(at_speed.RATIOS),
        metavar="RATIO",
        help="Table 1 only, at the speed llamacpp_at_speed.py --ratio RATIO read (default "
        "runs: the runs' own median step; run that script with the same ratio first)",
    )
    args = ap.parse_args(argv)
    stored = OUT / "matrix.json"
    if not stored.is_file():
        print(f"{stored}: not there; run validate_cpu.py --matrix first", file=sys.stderr)
        return 2
    results = json.loads(stored.read_text())["results"]
    jitter: dict[str, Any] = {"sigma": "fitted" if args.sigma is None else args.sigma}
    if args.wander:
        jitter = {"wander": "fitted"}
    if args.session:
        jitter = {**jitter, "session_cv": "fitted"}
    needs = [f for f, on in (("wander", args.wander), ("session", args.session)) if on]
    total = [[0, 0, 0, 0] for _ in TABLES]
    wide: list[list[float]] = [[] for _ in TABLES]
    spread: list[list[tuple[float, float]]] = [[] for _ in TABLES]
    print(f"cells in target of {len(METRICS)} a load: one noiseless run -> the median of "
          f"{args.draws} noise draws ({jitter}); real values inside the draws' band")  # fmt: skip
    for key, res in results.items():
        if args.points and key not in args.points:
            continue
        here = point_folder(key, OUT)
        line = [f"{key:14s}"]
        for t, ((suffix, _), tables) in enumerate(zip(TABLES, tables_of(res), strict=True)):
            if args.at_speed and t > 0:
                continue
            cells = [0, 0, 0, 0]
            folder = at_speed.folder(here, args.at_speed) if args.at_speed else here
            scenarios = {load: load_scenario(folder / f"{load}{suffix}.yaml") for load in tables}
            lacking = [f for f in needs if not all(has_fitted(sc, f) for sc in scenarios.values())]
            if lacking:
                line.append(f"T{t + 1} - (no {' or '.join(lacking)} in its fit)")
                continue
            for load, table in tables.items():
                scenario = scenarios[load]
                got = band(scenario.with_values({"cost.jitter": jitter}), args.draws, METRICS)
                for j, v in enumerate((*score(table, got), len(METRICS))):
                    cells[j] += v
                wide[t] += widths(table, got)
                spread[t] += spreads(table, got)
            total[t] = [a + b for a, b in zip(total[t], cells, strict=True)]
            line.append(f"T{t + 1} {cells[0]} -> {cells[1]} (band {cells[2]}) of {cells[3]}")
        print("   ".join(line), flush=True)
    every = [f"T{t + 1} {a} -> {b} (band {c}) of {n}"
             for t, (a, b, c, n) in enumerate(total) if n]  # fmt: skip
    print("all            " + "   ".join(every))
    print("the bands' width over the real value, median over the cells: " + "   ".join(
        f"T{t + 1} {statistics.median(w):.1%}" for t, w in enumerate(wide) if w))  # fmt: skip
    pairs = [
        f"T{t + 1} {statistics.median(r for r, _ in c):.1%} / "
        f"{statistics.median(d for _, d in c):.1%}"
        for t, c in enumerate(spread)
        if c
    ]
    print("run to run, standard deviation over the mean, median over the cells (real repeats "
          "/ draws): " + "   ".join(pairs))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
