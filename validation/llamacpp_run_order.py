"""How far a load's real runs stand from their point's level, run load by load or round by
round (issue 12, docs/VALIDATION-llamacpp.md item 86).

Until item 86 the matrix ran a point's real runs load by load: the three runs of Poisson
0.3, then the three of Poisson 0.6, and so on, each load's runs within a few minutes of
each other. A host that wanders over tens of minutes then puts a whole load in a slow or a
quick spell, and that load's median run with it, while Table 1 prices every load at one
speed. Round by round (every load's first run, then every load's second, ...) a load's
three runs are spread over the point's whole time, and their median stands nearer the
point's level.

``python validation/llamacpp_run_order.py [--field speed_batch] [--json OUT]`` reads every
kept matrix (``docs/validation/llamacpp-matrix*.json``), takes each point once (by its
finish stamp) whose every real run has the reading ``--field`` (``lyra-simpy speed`` right
before the run: ``speed_batch`` the full batch's decode steps, ``speed_lone`` a lone
sequence's), and treats the readings, in the order the runs ran, as the host's speed over
the point. It groups them into loads as the two orders would — load by load, runs 1–3 to
the first load; round by round, runs 1, 6 and 11 — and prints, per point, the mean over
its loads of |a load's median reading ÷ the point's median − 1|, and the mean over the
points. The readings were taken in the old order: the regrouping asks how a load's median
would spread had its runs been spread over the point, not what those runs would have
measured.

``--runs CFG/REGIME...`` takes instead each real run's own decode steps over Table 1's
charge (``compare RUN --steps LOAD.yaml`` on that run alone: the median step ratio) of
those points as ``validate_cpu.py --matrix`` left them in ``results/validation-llamacpp``
(``llamacpp_store.py unpack`` on a fresh clone), in the order they ran, and gives for each
order three means over the loads: from the point's level as above; |a load's median − 1|,
how far the load's runs sit from what Table 1 charges; and |a load's median ÷ Poisson
0.6's − 1| over the other four loads, how far they sit from the runs Table 2 is fitted on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
KEPT = HERE.parent / "docs" / "validation"
sys.path.insert(0, str(HERE))

from llamacpp_points import FIT_LOAD, LOADS, OUT, point_folder, rounds, run_order  # noqa: E402


def readings(res: dict[str, Any], field: str) -> list[float] | None:
    """The stored point *res*'s readings *field* in the order its runs ran (each run's
    median where it holds several); None when a run lacks one."""
    got = []
    for load, k in run_order(res):
        value = res["loads"][load]["machine"][k].get(field)
        if value is None:
            return None
        got.append(float(np.median(value)))
    return got


def load_medians(times: list[float], repeats: int, order: str) -> list[float]:
    """Each load's median of the values *times* (in time order, *repeats* a load) grouped
    into loads as *order* (``load`` or ``round``) runs them, in the order of LOADS."""
    ran = rounds(repeats) if order == "round" else [(load, k) for load in LOADS
                                                    for k in range(repeats)]  # fmt: skip
    places = {key: i for i, key in enumerate(ran)}
    return [float(np.median([times[places[(load, k)]] for k in range(repeats)]))
            for load in LOADS]  # fmt: skip


def spread(times: list[float], repeats: int, order: str) -> float:
    """The mean over the loads of |a load's median ÷ the point's median − 1|, the
    values *times* grouped into loads as *order* runs them (:func:`load_medians`)."""
    level = float(np.median(times))
    return float(np.mean([abs(m / level - 1) for m in load_medians(times, repeats, order)]))


def from_charge(times: list[float], repeats: int, order: str) -> list[float]:
    """|each load's median − 1|: the values being ratios to Table 1's charge, how far
    each load sits from it."""
    return [abs(m - 1) for m in load_medians(times, repeats, order)]


def from_fit_load(times: list[float], repeats: int, order: str) -> list[float]:
    """|each other load's median ÷ FIT_LOAD's − 1|: how far each sits from the runs
    Table 2 is fitted on."""
    got = dict(zip(LOADS, load_medians(times, repeats, order), strict=True))
    return [abs(m / got[FIT_LOAD] - 1) for load, m in got.items() if load != FIT_LOAD]


def run_ratios(key: str, res: dict[str, Any]) -> list[float]:
    """Each real run's median decode step over Table 1's charge (``compare --steps`` on the
    run alone), the stored point *key* (*res*) as the matrix left it, in the order they
    ran."""
    from lyra_simpy.live.stepcheck import step_check
    from lyra_simpy.scenario import load_scenario

    here = point_folder(key, OUT)
    out = []
    for load, k in run_order(res):
        run = here / "real" / load / f"run{k + 1}"
        if not run.is_dir():
            raise SystemExit(f"--runs: no {run} (run the matrix, or llamacpp_store.py unpack)")
        checked = step_check(load_scenario(here / f"{load}.yaml"), [run])
        out.append(round(float(checked["decode"]["median"]), 4))
    return out


def runs_table(keys: list[str]) -> dict[str, Any]:
    """``--runs``: each point's runs' ratios and, per order, the three means (module
    docstring), and the counts of loads within 3 %, 3–6 % and beyond of the charge and of
    FIT_LOAD over every point."""
    matrix = OUT / "matrix.json"
    if not matrix.is_file():
        raise SystemExit(f"--runs: no {matrix} (run the matrix, or llamacpp_store.py unpack)")
    results = json.loads(matrix.read_text())["results"]
    missing = [k for k in keys if k not in results]
    if missing:
        raise SystemExit(f"--runs: no stored point {missing[0]!r}; stored: {list(results)}")
    out: dict[str, Any] = {"points": {}, "bands": {}}
    pooled: dict[str, dict[str, list[float]]] = {}
    for key in keys:
        res = results[key]
        times = run_ratios(key, res)
        (n,) = {len(res["loads"][load]["machine"]) for load in LOADS}
        got: dict[str, Any] = {"ratios": times}
        for order in ("load", "round"):
            charge, fit = from_charge(times, n, order), from_fit_load(times, n, order)
            got[order] = {"level": round(spread(times, n, order), 4),
                          "charge": round(float(np.mean(charge)), 4),
                          "fit_load": round(float(np.mean(fit)), 4)}  # fmt: skip
            pooled.setdefault(order, {"charge": [], "fit_load": []})
            pooled[order]["charge"] += charge
            pooled[order]["fit_load"] += fit
        out["points"][key] = got
    for order, by in pooled.items():
        out["bands"][order] = {
            what: [sum(d <= 0.03 for d in ds), sum(0.03 < d <= 0.06 for d in ds),
                   sum(d > 0.06 for d in ds)]
            for what, ds in by.items()
        }  # fmt: skip
    return out


def kept_points(field: str) -> list[dict[str, Any]]:
    """Every point of the kept matrices, once each (by key and finish stamp), whose runs
    ran load by load with every run's *field*: its key, finish and both spreads."""
    seen: set[tuple[str, str]] = set()
    out = []
    for path in sorted(KEPT.glob("llamacpp-matrix*.json")):
        for key, res in json.loads(path.read_text()).get("results", {}).items():
            if "loads" not in res or "run_order" in res or not res.get("finished"):
                continue
            if sorted(res["loads"]) != sorted(LOADS) or (key, res["finished"]) in seen:
                continue
            repeats = {len(res["loads"][load]["machine"]) for load in LOADS}
            got = readings(res, field)
            if got is None or len(repeats) != 1 or repeats == {1}:
                continue
            seen.add((key, res["finished"]))
            (n,) = repeats
            out.append({"point": key, "finished": res["finished"], "file": path.name,
                        "load_by_load": round(spread(got, n, "load"), 4),
                        "round_by_round": round(spread(got, n, "round"), 4)})  # fmt: skip
    return sorted(out, key=lambda p: (p["finished"], p["point"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--field", default="speed_batch", choices=["speed_batch", "speed_lone"])
    parser.add_argument(
        "--runs",
        nargs="+",
        metavar="CFG/REGIME",
        default=None,
        help="each real run's own decode steps of these stored points instead",
    )
    parser.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = parser.parse_args(argv)
    if args.runs:
        table = runs_table(args.runs)
        print(f"{'point':15s} {'order':6s} {'from level':>10s} {'from charge':>11s} "
              f"{'from ' + FIT_LOAD:>17s}")  # fmt: skip
        for key, got in table["points"].items():
            for order in ("load", "round"):
                m = got[order]
                print(f"{key:15s} {order:6s} {m['level']:10.3f} {m['charge']:11.3f} "
                      f"{m['fit_load']:17.3f}")  # fmt: skip
        for order, bands in table["bands"].items():
            print(f"{order} by {order}: loads within 3 %, 3-6 %, beyond: of the charge "
                  f"{bands['charge']}, of {FIT_LOAD} {bands['fit_load']}")  # fmt: skip
        if args.json is not None:
            args.json.write_text(json.dumps({"runs": args.runs, **table}, indent=1) + "\n")
        return 0
    got = kept_points(args.field)
    if not got:
        raise SystemExit(f"no kept point has a {args.field} reading before every run")
    print(f"{'point':15s} {'finished':22s} {'load by load':>12s} {'round by round':>14s}")
    for p in got:
        print(f"{p['point']:15s} {p['finished']:22s} {p['load_by_load']:12.3f} "
              f"{p['round_by_round']:14.3f}")  # fmt: skip
    mean = {k: round(float(np.mean([p[k] for p in got])), 4)
            for k in ("load_by_load", "round_by_round")}  # fmt: skip
    closer = sum(p["round_by_round"] < p["load_by_load"] for p in got)
    print(
        f"{len(got)} points: mean {mean['load_by_load']:.4f} load by load, "
        f"{mean['round_by_round']:.4f} round by round; round by round closer at {closer}"
    )
    if args.json is not None:
        kept = {"field": args.field, "points": got, "mean": mean, "closer": closer}
        args.json.write_text(json.dumps(kept, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
