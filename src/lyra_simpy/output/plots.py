"""Matplotlib helpers shared by figures and notebooks: data in, ``Figure`` out.

Every figure is drawn under :data:`lyra_simpy.output.style.STYLE` (one style, sized for a
two-column paper) and saved with :func:`lyra_simpy.output.style.save` (identical bytes on rerun).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from lyra_simpy.output.style import HEIGHT_IN, STYLE, WIDTH_IN, save

__all__ = ["STYLE", "save"]  # re-exported: figures and notebooks save through plots

UNITS = {
    "ttft_ms": "TTFT (ms)",
    "tpot_ms": "TPOT (ms)",
    "e2el_ms": "end-to-end latency (ms)",
    "itl_ms": "inter-token latency (ms)",
    "output_throughput": "throughput (output tok/s)",
    "goodput_token_throughput": "goodput (output tok/s)",
    "request_goodput": "goodput (req/s)",
    "request_throughput": "throughput (req/s)",
    "slo_attainment": "SLO attainment",
    "prefix_cache_hit_rate": "prefix cache hit rate (tokens)",
    "prefix_cache_hit_rate_bound": "unlimited cache, one at a time",
    "rejection_rate": "rejected (fraction of arrivals)",
    "rate_per_s": "offered load (req/s)",
    "p99_ttft_ms": "p99 TTFT (ms)",
    "median_ttft_ms": "p50 TTFT (ms)",
    "p99_tpot_ms": "p99 TPOT (ms)",
    "p99_itl_ms": "p99 ITL (ms)",
    "num_blocks": "KV cache size (blocks)",
    "max_num_seqs": "max batch depth (seqs)",
    "p99_e2el_ms": "p99 end-to-end latency (ms)",
    "fairness_jain_slowdown": "Jain's index of slowdown",
    "mean_slowdown": "mean slowdown (x unloaded)",
    "p99_slowdown": "p99 slowdown (x unloaded)",
    "replicas": "replicas",
    "startup_s": "cold start (s)",
    "replica_hours": "replica-hours",
    "availability": "availability",
    "goodput_lost_to_failures": "goodput lost to failures (req/s)",
}


def label_of(name: str) -> str:
    return UNITS.get(name, name.replace("_", " "))


def cdf_line(
    ax: Any, values: npt.NDArray[np.float64], label: str, tail: bool = False, **line: Any
) -> None:
    """Draw the empirical CDF of *values* (NaN dropped) on *ax*; with *tail*, the
    fraction of values at or above each value instead."""
    v = np.sort(values[~np.isnan(values)])
    if len(v):
        below = np.arange(1, len(v) + 1) / len(v)
        ax.step(v, 1.0 - below + 1.0 / len(v) if tail else below, where="post", label=label,
                **line)  # fmt: skip


def cdf(
    samples: Mapping[str, npt.NDArray[np.float64]],
    metric: str,
    log_x: bool = False,
    title: str | None = None,
    tail: bool = False,
) -> Figure:
    """Empirical CDFs of *metric*, one line per label; with *tail*, the fraction above
    each value on a log scale instead (where p99 and p99.9 can be read)."""
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), layout="constrained")
        for label, values in samples.items():
            cdf_line(ax, values, label, tail)
        ax.set_xlabel(label_of(metric))
        what = "token gaps" if metric == "itl_ms" else "requests"
        if tail:
            ax.set_yscale("log")
            ax.set_ylabel(f"fraction of {what} ≥ x")
            for q in (1e-1, 1e-2, 1e-3):
                ax.axhline(q, color="0.7", linewidth=0.5, linestyle=":")
        else:
            ax.set_ylabel(f"fraction of {what}")
            ax.set_ylim(0, 1.02)
        if log_x:
            ax.set_xscale("log")
        ax.legend(frameon=False)
        if title:
            ax.set_title(title)
    return fig


def metrics_vs_param(
    x: Sequence[Any],
    ys: Mapping[str, Sequence[float]],
    xlabel: str,
    best: tuple[Any, float] | None = None,
    title: str | None = None,
    log_x: bool = False,
) -> Figure:
    """Lines of summary metrics against a swept parameter (one y axis per unit)."""
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), layout="constrained")
        for name, values in ys.items():
            ax.plot(x, values, marker="o", markersize=3, label=label_of(name))
        if best is not None:
            ax.axvline(best[0], color="0.5", linestyle=":", linewidth=1)
            ax.annotate(
                f"best: {best[0]}",
                (best[0], best[1]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
            )
        ax.set_xlabel(label_of(xlabel))
        if log_x:
            ax.set_xscale("log", base=2)
        ax.set_xticks(list(x), [str(v) for v in x])
        units = sorted({label_of(n).rpartition("(")[2].rstrip(")") for n in ys})
        ax.set_ylabel(label_of(next(iter(ys))) if len(ys) == 1 else " | ".join(units))
        ax.legend(frameon=False)
        if title:
            ax.set_title(title)
    return fig


def panels_vs_param(
    panels: Mapping[str, Mapping[str, tuple[Sequence[Any], Sequence[float]]]],
    xlabel: str,
    title: str | None = None,
    log_x: bool = False,
    log_y: Collection[str] = (),
    reference: tuple[str, float] | None = None,
) -> Figure:
    """One panel per metric (side by side), one line per series: ``panels[metric]
    [series] = (x values, y values)``; metrics in *log_y* on a log axis."""
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        n = len(panels)
        fig, axes = plt.subplots(
            1, n, figsize=(WIDTH_IN * n, HEIGHT_IN), sharex=True, layout="constrained",
            squeeze=False,
        )  # fmt: skip
        for ax, (metric, lines) in zip(axes[0], panels.items(), strict=True):
            for label, (x, y) in lines.items():
                ax.plot(x, y, marker="o", markersize=3, label=label)
            ax.set_xlabel(label_of(xlabel))
            ax.set_ylabel(label_of(metric))
            if log_x:
                ax.set_xscale("log", base=2)
            elif all(isinstance(v, int) for x, _ in lines.values() for v in x):
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no 2.5 replicas
            if metric in log_y:
                ax.set_yscale("log")
            if reference is not None and ax is axes[0][0]:
                ax.axhline(reference[1], color="0.4", linestyle="--", linewidth=0.8,
                           label=label_of(reference[0]))  # fmt: skip
            ax.legend(frameon=False)
        if title:
            fig.suptitle(title)
    return fig


def pareto(
    points: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    front: tuple[Sequence[float], Sequence[float]],
    x: str,
    y: str,
    title: str | None = None,
) -> Figure:
    """Every run as a point (one colour per series: ``points[series] = (xs, ys)``) and
    the non-dominated *front* connected: more *x* is better, less *y* is better."""
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), layout="constrained")
        for i, (label, (xs, ys)) in enumerate(points.items()):
            # hollow, one marker per series: runs that coincide stay visible
            ax.scatter(xs, ys, s=16, label=label, zorder=3, marker="os^Dv<>"[i % 7],
                       facecolors="none", edgecolors=f"C{i}", linewidths=0.9)  # fmt: skip
        ax.plot(*front, color="0.3", linewidth=0.8, linestyle="--", label="Pareto front")
        ax.set_xlabel(label_of(x))
        ax.set_ylabel(label_of(y))
        ax.legend(fontsize=6)
        if title:
            ax.set_title(title)
    return fig


def timeline(series: Mapping[str, npt.NDArray[Any]], title: str | None = None) -> Figure:
    """Per-iteration batch size, tokens computed (prompt tokens + one per decoding
    sequence), KV blocks in use and queue length against time."""
    panels = {
        "batch (seqs)": series["batch_seqs"],
        "tokens / iteration": series["prefill_tokens"] + series["decode_seqs"],
        "KV blocks used": series["kv_blocks"],
        "queue (reqs)": series["waiting"],
    }
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, axes = plt.subplots(4, 1, figsize=(WIDTH_IN, 4.2), sharex=True, layout="constrained")
        for ax, (ylabel, values) in zip(axes, panels.items(), strict=True):
            ax.step(series["start_s"], values, where="post", linewidth=0.8)
            ax.set_ylabel(ylabel)
        axes[-1].set_xlabel("time (s)")
        if title:
            axes[0].set_title(title)
    return fig


def over_time(
    lines: Mapping[str, Mapping[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]],
    title: str | None = None,
) -> Figure:
    """Panels stacked over a shared time axis, one line per label: ``lines[label]
    [panel] = (times, values)``; panels named ``replicas serving`` or ``waiting …`` are
    drawn as steps, ``… TTFT …`` on a log axis."""
    panels = list(dict.fromkeys(p for series in lines.values() for p in series))
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, axes = plt.subplots(
            len(panels), 1, figsize=(WIDTH_IN * 1.6, 0.6 + 1.0 * len(panels)), sharex=True,
            layout="constrained", squeeze=False,
        )  # fmt: skip
        for ax, panel in zip(axes[:, 0], panels, strict=True):
            for i, (label, series) in enumerate(lines.items()):
                if panel not in series:
                    continue
                t, v = series[panel]
                if panel.startswith(("replicas", "waiting")):
                    ax.step(t, v, where="post", linewidth=0.8, color=f"C{i}", label=label)
                else:
                    ax.plot(t, v, linewidth=0.8, color=f"C{i}", label=label)
            if "TTFT" in panel:
                ax.set_yscale("log")
            ax.set_ylabel(panel, fontsize=6)
        axes[0, 0].legend(frameon=False, fontsize=6, ncols=min(len(lines), 4))
        axes[-1, 0].set_xlabel("time (s)")
        if title:
            axes[0, 0].set_title(title)
    return fig


def iteration_times(
    lines: Mapping[
        str, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]
    ],
    title: str | None = None,
) -> Figure:
    """Iteration duration (ms) against its start time, one panel per label; iterations
    that carried no decode (the decodes stalled) in a second colour."""
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        n = max(len(lines), 1)
        fig, axes = plt.subplots(
            n, 1, figsize=(WIDTH_IN, 0.9 + 0.8 * n), sharex=True, sharey=True, layout="constrained"
        )
        axes = np.atleast_1d(axes)
        for i, (ax, (label, (t, ms, decoded))) in enumerate(zip(axes, lines.items(), strict=False)):
            ax.vlines(t[decoded], 0, ms[decoded], linewidth=0.6, color="C0",
                      label="with decodes" if i == 0 else None)  # fmt: skip
            ax.vlines(t[~decoded], 0, ms[~decoded], linewidth=0.6, color="C3",
                      label="decodes stalled" if i == 0 else None)  # fmt: skip
            ax.set_ylabel("ms", rotation=0, labelpad=8)
            ax.text(0.01, 0.95, label, transform=ax.transAxes, va="top", fontsize=7)
            ax.set_yscale("symlog", linthresh=10)
        axes[0].legend(frameon=False, loc="upper right", fontsize=6, ncols=2)
        axes[-1].set_xlabel("time (s)")
        if title:
            axes[0].set_title(title)
    return fig


def grouped_bars(
    values: Mapping[str, Mapping[str, Mapping[str, float]]],
    log_y: bool = False,
    title: str | None = None,
) -> Figure:
    """One panel per metric of ``values[metric][group][series]``: a cluster of bars per
    group, one bar (and colour) per series, stacked panels sharing the groups."""
    metrics = list(values)
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, axes = plt.subplots(
            len(metrics), 1, figsize=(WIDTH_IN, 0.4 + 1.9 * len(metrics)), sharex=True,
            layout="constrained", squeeze=False,
        )  # fmt: skip
        groups = list(values[metrics[0]])
        series = list(dict.fromkeys(s for g in groups for s in values[metrics[0]][g]))
        width = 0.8 / max(len(series), 1)
        x = np.arange(len(groups))
        for ax, metric in zip(axes[:, 0], metrics, strict=True):
            for i, name in enumerate(series):
                ys = [values[metric][g].get(name, np.nan) for g in groups]
                ax.bar(x + (i - (len(series) - 1) / 2) * width, ys, width, label=name or None)
            ax.set_ylabel(label_of(metric))
            if log_y:
                ax.set_yscale("log")
        axes[-1, 0].set_xticks(x, groups, rotation=30, ha="right")
        if any(series):
            axes[0, 0].legend(frameon=False, ncols=len(series))
        if title:
            axes[0, 0].set_title(title)
    return fig


def profile_residuals(
    measured_ms: npt.NDArray[np.float64],
    predicted_ms: npt.NDArray[np.float64],
    phase: npt.NDArray[np.str_],
    title: str | None = None,
) -> Figure:
    """A fitted cost model against its profile: predicted vs measured step time (left,
    log-log, the diagonal is a perfect fit) and the relative error of every row (right),
    one colour per phase."""
    rel = (predicted_ms - measured_ms) / measured_ms
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, (left, right) = plt.subplots(
            1, 2, figsize=(2 * WIDTH_IN, HEIGHT_IN + 0.2), layout="constrained"
        )
        for name in ("prefill", "decode", "mixed"):
            sel = phase == name
            if sel.any():
                left.scatter(measured_ms[sel], predicted_ms[sel], s=8, label=name)
                right.scatter(np.flatnonzero(sel) + 2, 100 * rel[sel], s=8, label=name)
        lo = float(min(measured_ms.min(), predicted_ms.min()))
        hi = float(max(measured_ms.max(), predicted_ms.max()))
        left.plot([lo, hi], [lo, hi], color="0.5", linewidth=0.8, linestyle="--")
        left.set_xscale("log")
        left.set_yscale("log")
        left.set_xlabel("measured step time (ms)")
        left.set_ylabel("predicted step time (ms)")
        left.legend(frameon=False)
        right.axhline(0, color="0.5", linewidth=0.8)
        right.set_xlabel("profile CSV line")
        right.set_ylabel("relative error (%)")
        if title:
            fig.suptitle(title)
    return fig


def capacity_curve(
    x: Sequence[float],
    attainment: Sequence[tuple[float, float, float]],
    target: float,
    xlabel: str,
    answer: float | None = None,
) -> Figure:
    """Mean SLO attainment (band: the seeds' min to max) against load; target, answer."""
    mean, low, high = (np.array(col) for col in zip(*attainment, strict=True))
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), layout="constrained")
        ax.fill_between(x, low, high, alpha=0.25, linewidth=0)
        ax.plot(x, mean, marker="o", markersize=3, label="mean over seeds")
        ax.axhline(target, color="0.4", linestyle="--", linewidth=1, label=f"target {target:g}")
        if answer is not None:
            ax.axvline(answer, color="0.4", linestyle=":", linewidth=1, label=f"{answer:.4g}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label_of("slo_attainment"))
        ax.set_ylim(-0.02, 1.02)
        ax.legend(frameon=False)
    return fig
