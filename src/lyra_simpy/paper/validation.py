"""Simulated against real: TTFT and TPOT distributions of a simulated run overlaid on
those of one or more replays of the same workload on a real engine.

Every folder holds a ``requests.jsonl`` in the per-request contract (DESIGN §4), which
simulated runs and real-endpoint replays both write; only ``status == "ok"`` requests
with a value count. :func:`find_validation_runs` reads the layout the validation job
writes: ``docs/validation/sim/<workload>/`` and ``docs/validation/real/<workload>/run*/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
from matplotlib.figure import Figure

from lyra_simpy.metrics.io import read_jsonl
from lyra_simpy.output.plots import cdf_line, label_of
from lyra_simpy.output.style import HEIGHT_IN, STYLE, WIDTH_IN

METRICS = ("ttft_ms", "tpot_ms")
"""The per-request latencies compared, one panel each."""


def ok_values(folder: Path, metric: str) -> npt.NDArray[np.float64]:
    """*metric* of every completed request in *folder*/requests.jsonl."""
    rows = read_jsonl(folder / "requests.jsonl")
    vals = [r[metric] for r in rows if r["status"] == "ok" and r.get(metric) is not None]
    return np.asarray(vals, dtype=np.float64)


def find_validation_runs(validation_dir: Path) -> dict[str, tuple[Path, list[Path]]]:
    """``{workload: (simulated folder, [real run folders])}`` for every workload that has
    both a simulated result and at least one real run under *validation_dir*."""
    found: dict[str, tuple[Path, list[Path]]] = {}
    sim_root = validation_dir / "sim"
    if not sim_root.is_dir():
        return found
    for sim in sorted(p for p in sim_root.iterdir() if (p / "requests.jsonl").is_file()):
        runs = sorted((validation_dir / "real" / sim.name).glob("run*"))
        real = [r for r in runs if (r / "requests.jsonl").is_file()]
        if real:
            found[sim.name] = (sim, real)
    return found


def sim_vs_real_figure(workloads: Mapping[str, tuple[Path, Sequence[Path]]]) -> Figure:
    """One row per workload, one panel per metric in ``METRICS``: the simulated CDF
    (solid) over each real run's CDF (thin, dashed; runs show the real engine's own
    run-to-run spread)."""
    if not workloads:
        raise ValueError("sim_vs_real needs at least one workload")
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        rows = len(workloads)
        fig, axes = plt.subplots(
            rows, len(METRICS), figsize=(2 * WIDTH_IN, HEIGHT_IN * rows), layout="constrained",
            squeeze=False,
        )  # fmt: skip
        for row, (workload, (sim, real)) in zip(axes, workloads.items(), strict=True):
            for ax, metric in zip(row, METRICS, strict=True):
                runs = f"real ({len(real)} run{'s' if len(real) > 1 else ''})"
                for i, run in enumerate(real):
                    cdf_line(ax, ok_values(run, metric), runs if i == 0 else "",
                             color="0.45", linewidth=0.8, linestyle="--")  # fmt: skip
                cdf_line(ax, ok_values(sim, metric), "simulated", color="C0")
                ax.set_xlabel(label_of(metric))
                ax.set_ylabel("fraction of requests")
                ax.set_ylim(0, 1.02)
            row[0].legend(loc="lower right", fontsize=6)
            if rows > 1:
                row[0].set_title(workload, loc="left")
    return fig
