"""Figures drawn from a scenario's result folder. ``FIGURES`` maps a figure ``name``
(as in a scenario's ``figures:`` list) to a function ``(results_dir, spec) -> Figure``;
:func:`draw_scenario_figures` saves them, and the paper registry
(:mod:`lyra_simpy.paper`) draws the same figures through the same functions.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
from matplotlib.figure import Figure

import lyra_simpy.output.plots as plots
from lyra_simpy.dotted import get_path
from lyra_simpy.metrics.io import read_itl_csv, read_jsonl, read_series, read_series_csv
from lyra_simpy.metrics.summary import number
from lyra_simpy.output.style import STYLE, WIDTH_IN
from lyra_simpy.report import FigureSpec
from lyra_simpy.scenario import Scenario


def _variants(results_dir: Path) -> list[Path]:
    """Variant folders in the order they were run (the manifest's label order)."""
    folders = [p for p in results_dir.iterdir() if (p / "summary.json").is_file()]
    return sorted(folders, key=lambda p: (_manifest(p).get("variant_index", 0), p.name))


def _manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "manifest.json").read_text())  # type: ignore[no-any-return]


def cdf_figure(results_dir: Path, spec: FigureSpec) -> Figure:
    samples = {}
    for folder in _variants(results_dir):
        if spec.metric == "itl_ms":  # pooled gaps, one sample per token
            values, counts = read_itl_csv(folder / "itl.csv")
            samples[folder.name] = np.repeat(values, counts)
            continue
        rows = read_jsonl(folder / "requests.jsonl")
        vals = [r[spec.metric] for r in rows if r["status"] == "ok" and r[spec.metric] is not None]
        samples[folder.name] = np.asarray(vals, dtype=np.float64)
    return plots.cdf(samples, spec.metric, spec.log_x, spec.title, tail=spec.tail)


def metrics_vs_param_figure(results_dir: Path, spec: FigureSpec) -> Figure:
    assert spec.param is not None  # (FigureSpec checks it at load)
    if spec.series is not None:
        return _series_vs_param_figure(results_dir, spec, spec.param, spec.series)
    points = []
    for folder in _variants(results_dir):
        x = get_path(_manifest(folder)["scenario"], spec.param)
        summary = json.loads((folder / "summary.json").read_text())
        points.append((x, summary))
    points.sort(key=lambda p: p[0])
    xs = [p[0] for p in points]
    ys = {m: [number(p[1][m]) for p in points] for m in spec.metrics}  # None: NaN
    first = spec.metrics[-1]
    i_best = int(np.nanargmax(ys[first])) if not np.isnan(ys[first]).all() else 0
    return plots.metrics_vs_param(
        xs, ys, spec.param.split(".")[-1], (xs[i_best], ys[first][i_best]), spec.title, spec.log_x
    )


def _log_metrics(spec: FigureSpec) -> set[str]:
    """The metrics *spec* draws on a log axis."""
    if isinstance(spec.log_y, list):
        return set(spec.log_y)
    return set(spec.metrics) if spec.log_y else set()


def _series_key(series: str, scenario: dict[str, Any]) -> str:
    """The value of the *series* path in a variant's resolved *scenario*; ``series``
    itself names the grid's series label (the label less ``_<value>``)."""
    if series == "series":
        return str(scenario["label"]).rsplit("_", 1)[0]
    value = get_path(scenario, series)
    return "none" if value is None else str(value)


def pareto_front(xs: Sequence[float], ys: Sequence[float]) -> list[int]:
    """Indices of the non-dominated points, by increasing x: no other point has at
    least as much x and at most as much y, with one of the two strictly better (points
    with a NaN, e.g. no request completed, are left out)."""
    finite = [i for i in range(len(xs)) if math.isfinite(xs[i]) and math.isfinite(ys[i])]
    front = [
        i
        for i in finite
        if not any(
            xs[j] >= xs[i] and ys[j] <= ys[i] and (xs[j] > xs[i] or ys[j] < ys[i]) for j in finite
        )
    ]
    return sorted(front, key=lambda i: (xs[i], ys[i]))


def pareto_figure(results_dir: Path, spec: FigureSpec) -> Figure:
    """Every variant at (``metrics[0]``, ``metrics[1]``), e.g. throughput against p99
    TPOT, coloured by *series*, with the latency–throughput Pareto front connected."""
    x, y = spec.metrics
    points: dict[str, tuple[list[float], list[float]]] = {}
    for folder in _variants(results_dir):
        summary = json.loads((folder / "summary.json").read_text())
        key = _series_key(spec.series, _manifest(folder)["scenario"]) if spec.series else "runs"
        xs, ys = points.setdefault(key, ([], []))
        xs.append(number(summary[x]))
        ys.append(number(summary[y]))
    all_x = [v for xs, _ in points.values() for v in xs]
    all_y = [v for _, ys in points.values() for v in ys]
    front = pareto_front(all_x, all_y)
    return plots.pareto(
        points, ([all_x[i] for i in front], [all_y[i] for i in front]), x, y, spec.title
    )


def _series_vs_param_figure(results_dir: Path, spec: FigureSpec, param: str, series: str) -> Figure:
    """One panel per metric, one line per value of the *series* path."""
    lines: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    reference = None
    for folder in _variants(results_dir):
        scenario = _manifest(folder)["scenario"]
        summary = json.loads((folder / "summary.json").read_text())
        key = _series_key(series, scenario)
        if spec.reference is not None and reference is None:
            reference = (spec.reference, number(summary[spec.reference]))
        lines.setdefault(key, []).append((get_path(scenario, param), summary))
    for pts in lines.values():
        pts.sort(key=lambda p: p[0])
    panels = {
        m: {
            key: ([x for x, _ in pts], [number(summary[m]) for _, summary in pts])
            for key, pts in lines.items()
        }
        for m in spec.metrics
    }
    return plots.panels_vs_param(
        panels, param.split(".")[-1], spec.title, spec.log_x, _log_metrics(spec), reference
    )


def timeline_figure(results_dir: Path, spec: FigureSpec) -> Figure:
    folders = _variants(results_dir)
    folder = next((f for f in folders if f.name == spec.variant), folders[0])
    series = read_series(folder)
    return plots.timeline(series, spec.title)


def iteration_times_figure(results_dir: Path, spec: FigureSpec) -> Figure:
    """Each variant's iteration durations against time (stalls show as spikes)."""
    lines = {}
    for folder in _variants(results_dir):
        series = read_series(folder)
        start, end = series["start_s"], series["end_s"]
        keep = np.ones(len(start), dtype=bool)
        if spec.window_s is not None:
            keep = (start >= spec.window_s[0]) & (start <= spec.window_s[1])
        lines[folder.name] = (
            start[keep],
            (end - start)[keep] * 1000.0,
            series["decode_seqs"][keep] > 0,
        )
    return plots.iteration_times(lines, spec.title)


def grouped_bars_figure(results_dir: Path, spec: FigureSpec) -> Figure:
    """Summary *metrics* as bars: variants labelled ``<group>.<series>`` (e.g.
    ``poisson.fcfs``) give one cluster per group with one bar per series, in run order;
    a label without a dot is a group of its own."""
    groups: dict[str, dict[str, dict[str, float]]] = {}
    for folder in _variants(results_dir):
        group, _, series = folder.name.rpartition(".")
        summary = json.loads((folder / "summary.json").read_text())
        groups.setdefault(group or series, {})[series if group else ""] = summary
    values = {
        m: {g: {s: number(v[m]) for s, v in by.items()} for g, by in groups.items()}
        for m in spec.metrics
    }
    return plots.grouped_bars(values, bool(spec.log_y), spec.title)


def over_time_figure(results_dir: Path, spec: FigureSpec) -> Figure:
    """What happened over the run, per variant: the arrival rate, the replicas serving
    (``replicas.csv``, with processes), the requests waiting for their first token, and
    the p99 TTFT of the requests arriving in each time bin."""
    folders = {f.name: f for f in _variants(results_dir)}
    names = spec.labels or list(folders)
    missing = [name for name in names if name not in folders]
    if missing:
        raise ValueError(f"over_time: labels {missing} are not variants of {results_dir.name}")
    lines = {}
    for name in names:
        folder = folders[name]
        rows = read_jsonl(folder / "requests.jsonl")
        arrival = np.array([r["arrival_s"] for r in rows], dtype=np.float64)
        first = np.array([number(r["first_token_s"]) for r in rows], dtype=np.float64)
        ttft = np.array([number(r["ttft_ms"]) for r in rows], dtype=np.float64)
        ok = np.array([r["status"] == "ok" for r in rows], dtype=bool)
        end = float(_manifest(folder)["engine"]["end_s"])
        lines[name] = _over_time(arrival, first, ttft, ok, end, folder, spec.bin_s)
    return plots.over_time(lines, spec.title)


def _over_time(
    arrival: npt.NDArray[np.float64],
    first: npt.NDArray[np.float64],
    ttft: npt.NDArray[np.float64],
    ok: npt.NDArray[np.bool_],
    end_s: float,
    folder: Path,
    bin_s: float | None,
) -> dict[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]:
    width = bin_s if bin_s is not None else max(end_s, 1e-9) / 100.0
    edges = np.arange(0.0, end_s + width, width)
    mids = (edges[:-1] + edges[1:]) / 2.0
    rate = np.histogram(arrival, edges)[0] / width
    which = np.digitize(arrival, edges) - 1
    p99 = np.full(len(mids), np.nan)
    for i in range(len(mids)):
        got = ttft[ok & (which == i)]
        if len(got):
            p99[i] = np.percentile(got, 99.0)
    # waiting for a first token: +1 at arrival, -1 at the first token (never: to the end)
    stops = np.where(np.isnan(first), np.inf, first)
    times = np.concatenate((arrival, stops))
    steps = np.concatenate((np.ones(len(arrival)), -np.ones(len(stops))))
    order = np.argsort(times, kind="stable")
    times, waiting = times[order], np.cumsum(steps[order])
    keep = np.isfinite(times)
    out = {"arrival rate (req/s)": (mids, rate)}
    replicas = folder / "replicas.csv"
    if replicas.is_file():
        table = read_series_csv(replicas)
        last = np.append(table["time_s"][1:] != table["time_s"][:-1], True)  # of an instant
        t = np.append(table["time_s"][last], end_s)
        serving = table["serving"][last]
        out["replicas serving"] = (t, np.append(serving, serving[-1]))
    out["waiting for a first token"] = (times[keep], waiting[keep])
    out["p99 TTFT (ms)"] = (mids, p99)
    return out


def whatif_figure(results_dir: Path, spec: FigureSpec) -> Figure:
    """The what-if scorecard (``whatif.csv``, ``whatif.json``) as a grid of speedups."""
    doc = json.loads((results_dir / "whatif.json").read_text())
    with (results_dir / "whatif.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    candidates = list(dict.fromkeys(r["candidate"] for r in rows))
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    groups = list(next(iter(doc["geomeans"].values())))
    speedup = {(r["candidate"], r["workload"]): float(r["speedup"]) for r in rows}
    grid = np.array(
        [
            [speedup[c, w] for w in workloads] + [doc["geomeans"][c][g] for g in groups]
            for c in candidates
        ]
    )
    columns = workloads + [f"{g} (geomean)" for g in groups]
    scores = [doc["scores"][c] for c in candidates]
    return _speedup_grid(grid, candidates, columns, scores, spec.title)


def _speedup_grid(
    speedups: npt.NDArray[np.float64],
    rows: Sequence[str],
    columns: Sequence[str],
    scores: Sequence[float],
    title: str | None,
) -> Figure:
    """Speedups of candidates (rows) on workloads and group geomeans (columns), each cell
    coloured on a log scale around 1x (blue faster, red slower) and printed; the score
    of each row at the right."""
    from matplotlib.colors import TwoSlopeNorm

    logs = np.log2(speedups)
    span = max(float(np.nanmax(np.abs(logs))), 0.05)
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, ax = plt.subplots(figsize=(2 * WIDTH_IN, 0.8 + 0.24 * len(rows)), layout="constrained")
        ax.imshow(logs, cmap="RdBu", norm=TwoSlopeNorm(0.0, -span, span), aspect="auto")
        for (i, j), value in np.ndenumerate(speedups):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6.5)
        for i, score in enumerate(scores):
            ax.text(len(columns) - 0.4, i, f"{score:.3f}", ha="left", va="center", fontsize=6.5)
        ax.text(len(columns) - 0.4, -0.8, "score", ha="left", va="center", fontsize=7)
        ax.set_xticks(range(len(columns)), columns, rotation=30, ha="right")
        ax.set_yticks(range(len(rows)), rows)
        ax.tick_params(length=0)
        ax.grid(False)
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.set_xlabel("speedup over the baseline (×)")
        if title:
            ax.set_title(title)
    return fig


FIGURES: dict[str, Callable[[Path, FigureSpec], Figure]] = {
    "cdf": cdf_figure,
    "metrics_vs_param": metrics_vs_param_figure,
    "timeline": timeline_figure,
    "iteration_times": iteration_times_figure,
    "grouped_bars": grouped_bars_figure,
    "pareto": pareto_figure,
    "whatif": whatif_figure,
    "over_time": over_time_figure,
}


def draw_scenario_figures(scenario: Scenario, results_dir: Path, figures_dir: Path) -> list[Path]:
    """Draw every figure *scenario* declares from *results_dir* into *figures_dir*."""
    figures_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for spec in scenario.figures:
        path = figures_dir / f"{spec.file_stem(scenario.name)}.png"
        plots.save(FIGURES[spec.name](results_dir, spec), path)
        out.append(path)
    return out
