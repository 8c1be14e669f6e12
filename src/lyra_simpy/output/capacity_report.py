"""``lyra-simpy capacity``'s input and output: the ``--slo`` option, and the searched
curve and the answer, printed and written."""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

from lyra_simpy.capacity import VARY, Capacity
from lyra_simpy.errors import ScenarioError
from lyra_simpy.output.tables import format_table

#: ``--slo`` keys → SLO fields (ms).
SLO_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2el_ms"}


def parse_slo(text: str) -> dict[str, float]:
    """``ttft=300,tpot=40`` → ``{"ttft_ms": 300.0, "tpot_ms": 40.0}``."""
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        name = SLO_KEYS.get(key.strip().removesuffix("_ms"))
        if not sep or name is None:
            raise ScenarioError(
                f"--slo: got {part.strip()!r}, must be KEY=MS with KEY one of {sorted(SLO_KEYS)}"
            )
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not 0 < ms < math.inf:
            raise ScenarioError(f"--slo {key.strip()}: got {value.strip()!r}, must be ms > 0")
        out[name] = ms
    return out


def format_capacity(cap: Capacity, name: str = "scenario") -> str:
    """The curve as a table, then the answer, as the command prints them."""
    what = "highest rate" if cap.vary == "arrival.rate" else "fewest replicas"
    slo = ", ".join(f"{k} <= {v:g}" for k, v in cap.slo.items() if v is not None)
    rows = [
        [
            f"{p.x:.4g}",
            f"{p.mean:.3f}",
            f"{min(p.attainment):.3f}",
            f"{max(p.attainment):.3f}",
            f"{statistics.fmean(p.goodput_req_s):.4g}",
        ]
        for p in cap.curve()
    ]
    lines = [
        f"capacity of {name}: {what} with mean SLO attainment >= {cap.target:g}",
        f"SLO {slo}; {len(cap.seeds)} seed(s) {cap.seeds}",
        format_table([cap.unit, "attainment", "min", "max", "goodput(req/s)"], rows),
    ]
    if cap.answer is None:
        lines.append(f"answer: none ({cap.note})")
        return "\n".join(lines)
    mean = statistics.fmean(cap.runs[cap.answer, s][0] for s in range(len(cap.seeds)))
    found = [x for x in cap.per_seed if x is not None]
    spread = f"{min(found):.4g} to {max(found):.4g}" if found else "none"
    # a seed never met the target at any probe: its answer lies below (above for replicas)
    missing = len(cap.per_seed) - len(found)
    lines.append(
        f"answer: {cap.answer:.4g} {cap.unit} (mean attainment {mean:.3f}); "
        f"per-seed answers {spread} {cap.unit}"
        + (f", {missing} seed(s) missed the target at every probe" if missing else "")
    )
    return "\n".join(lines)


def write_capacity(cap: Capacity, out: str | Path) -> list[Path]:
    """``OUT/capacity_curve.csv`` (one row per probe) and ``OUT/capacity.png``."""
    import lyra_simpy.output.plots as plots

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    x_name = VARY[cap.vary][0].rsplit(".", 1)[1]
    table = folder / "capacity_curve.csv"
    with table.open("w", newline="") as fh:
        writer = csv.writer(fh)
        per_seed = [f"attainment_seed_{s}" for s in cap.seeds]
        writer.writerow(
            [
                x_name,
                "mean_attainment",
                "min_attainment",
                "max_attainment",
                "mean_request_goodput",
                *per_seed,
            ]
        )
        for p in cap.curve():
            writer.writerow(
                [
                    p.x,
                    p.mean,
                    min(p.attainment),
                    max(p.attainment),
                    statistics.fmean(p.goodput_req_s),
                    *p.attainment,
                ]
            )
    curve = cap.curve()
    fig = plots.capacity_curve(
        [p.x for p in curve],
        [(p.mean, min(p.attainment), max(p.attainment)) for p in curve],
        cap.target,
        plots.label_of(x_name),
        cap.answer,
    )
    figure = folder / "capacity.png"
    plots.save(fig, figure)
    return [table, figure]
