"""Simulated against real: the relative error of every summary metric, and CDFs.

``lyra-simpy compare SIM_DIR REAL_DIR...`` reads the ``summary.json``,
``requests.jsonl`` and ``itl.csv`` that a simulation and a replay both write (DESIGN
§4). With several real runs (the same workload replayed again) the reference is their
*median*, and the table gives the real runs' own spread beside the simulator's error —
the noise floor the error should be read against (VALIDATION-NOTES):

* ``error`` = (sim − median real) / median real;
* ``spread`` = the largest |real run − median real| / median real (a ± half-band).

With a band (:mod:`~lyra_simpy.live.band`: the scenario simulated under N draws of its
step-time noise) each row also has ``band_low``, ``band_high`` and ``inside``: whether the
real median lies in the band.

The figure overlays the CDFs of TTFT, TPOT, ITL and E2E latency: the simulation in one
line, every real run in thin lines.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from lyra_simpy.errors import TraceError
from lyra_simpy.metrics.io import read_itl_csv, read_jsonl

LATENCIES = ("ttft", "tpot", "itl", "e2el")
METRICS: tuple[str, ...] = (
    *(f"{stat}_{name}_ms" for name in LATENCIES for stat in ("median", "p90", "p99")),
    "request_throughput",
    "output_throughput",
)
"""Compared summary names (vLLM's), in table order."""


def _summary(folder: Path) -> dict[str, Any]:
    path = folder / "summary.json"
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise TraceError(
            f"{path}: cannot read ({exc.strerror}); is {folder} a run folder?"
        ) from None
    except ValueError as exc:
        raise TraceError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TraceError(f"{path}: not a summary (must be a JSON object)")
    return data


def _rel(a: float, b: float) -> float:
    return (a - b) / b if b else (0.0 if a == b else math.inf)


def compare_row(name: str, sim: float, runs: list[float]) -> dict[str, Any]:
    """One metric's row: *sim* against the median of the real *runs* (``error``) and the
    runs' own ``spread``, the farthest of them from that median (fractions)."""
    ref = float(np.median(runs))
    return {
        "metric": name,
        "sim": sim,
        "real": ref,
        "error": _rel(sim, ref),
        "spread": max(abs(_rel(r, ref)) for r in runs),
        "runs": runs,
    }


def compare(
    sim_dir: Path,
    real_dirs: list[Path],
    figure: Path | None = None,
    out_json: Path | None = None,
    bands: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per metric: ``metric``, ``sim``, ``real`` (median), ``error``,
    ``spread`` (fractions), ``runs`` (each real value); with *bands*
    (:func:`~lyra_simpy.live.band.band`) also ``band_low``, ``band_high``, ``inside``."""
    from lyra_simpy.live.band import inside

    sim = _summary(sim_dir)
    reals = [_summary(d) for d in real_dirs]
    table = []
    for name in METRICS:
        missing = [
            str(d)
            for d, s in zip([sim_dir, *real_dirs], [sim, *reals], strict=True)
            if name not in s
        ]
        if missing:
            raise TraceError(f"{missing[0]}/summary.json: no {name!r} (not a lyra-simpy summary?)")
        row = compare_row(name, float(sim[name]), [float(s[name]) for s in reals])
        if bands is not None:
            interval = bands[name]
            row.update(
                band_low=interval["low"],
                band_high=interval["high"],
                inside=inside(row["real"], interval),
            )
        table.append(row)
    if out_json is not None:
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(table, indent=2) + "\n")
    if figure is not None:
        save_cdfs(sim_dir, real_dirs, figure)
    return table


def format_comparison(table: list[dict[str, Any]]) -> str:
    """The table as text: metric, sim, real (median), error %, real spread ±%."""
    banded = bool(table) and "inside" in table[0]
    head = f"{'metric':<22}{'sim':>11}{'real':>11}{'error':>9}{'spread':>9}"
    lines = [head + (f"{'band (sim, N draws)':>26}  real inside" if banded else "")]
    for row in table:
        line = (
            f"{row['metric']:<22}{row['sim']:>11.4g}{row['real']:>11.4g}"
            f"{row['error'] * 100:>+8.1f}%{row['spread'] * 100:>7.1f}%"
        )
        if banded:
            low, high = row["band_low"], row["band_high"]
            span = "n/a" if low is None else f"[{low:.4g}, {high:.4g}]"
            verdict = {True: "yes", False: "no", None: "n/a"}[row["inside"]]
            line += f"{span:>26}  {verdict}"
        lines.append(line)
    return "\n".join(lines)


def latency_samples(folder: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(values in ms, weights) of latency *name* over a run's completed requests."""
    if name == "itl":
        return read_itl_csv(folder / "itl.csv")
    rows = read_jsonl(folder / "requests.jsonl")
    key = f"{name}_ms"
    vals = np.array(
        [r[key] for r in rows if r["status"] == "ok" and r[key] is not None], dtype=np.float64
    )
    return vals, np.ones(len(vals), dtype=np.int64)


def save_cdfs(sim_dir: Path, real_dirs: list[Path], path: Path) -> None:
    """Overlaid CDFs of the four latencies (the simulation thick, real runs thin)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(14, 3.2))
    for ax, name in zip(axes, LATENCIES, strict=True):
        for k, folder in enumerate([sim_dir, *real_dirs]):
            vals, weights = latency_samples(folder, name)
            if not len(vals):
                continue
            order = np.argsort(vals)
            cum = np.cumsum(weights[order]) / weights.sum()
            real = k > 0
            ax.step(
                vals[order],
                cum,
                where="post",
                color="tab:orange" if real else "tab:blue",
                lw=0.9 if real else 2.0,
                alpha=0.8 if real else 1.0,
                label=("real" if k == 1 else None) if real else "simulated",
            )
        ax.set_xlabel(f"{name.upper()} (ms)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("CDF")
    axes[0].legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"CreationDate": None} if path.suffix == ".pdf" else None)
    plt.close(fig)
