"""What a scenario prints and draws: its table columns and its figures.

Columns name a summary metric (``output_throughput``, ``p99_ttft_ms`` …), ``label``, or
a dotted scenario path (``scheduler.max_num_seqs``), under a header of the scenario's
choosing, so each scenario prints the table its question needs. ``best`` names a metric
to maximise across variants; the winner is printed under the table.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, PositiveFloat, model_validator

from lyra_simpy.config import Closed


class ReportConfig(Closed):
    """The table printed after a scenario's runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    columns: dict[str, str] = Field(
        default_factory=lambda: {
            "variant": "label",
            "thru(tok/s)": "output_throughput",
            "goodput(req/s)": "request_goodput",
            "p50_TTFT": "median_ttft_ms",
            "p99_TTFT": "p99_ttft_ms",
            "p50_TPOT": "median_tpot_ms",
            "completed": "completed",
        }
    )
    """Header → metric name, ``label``, or dotted scenario path."""
    best: str | None = None
    """Metric to maximise across variants; the best variant is named under the table."""


class OutputConfig(Closed):
    """Extra files a run writes beside each variant's results."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace_events: bool = False
    """``trace_events.json``: the run as a Perfetto / chrome://tracing timeline
    (:mod:`lyra_simpy.output.trace_events`); also ``lyra-simpy run --trace-events``."""


FIGURE_FIELDS: dict[str, frozenset[str]] = {
    "cdf": frozenset({"metric", "tail", "log_x"}),
    "metrics_vs_param": frozenset({"param", "metrics", "series", "log_x", "log_y", "reference"}),
    "timeline": frozenset({"variant"}),
    "iteration_times": frozenset({"window_s"}),
    "grouped_bars": frozenset({"metrics", "log_y"}),
    "pareto": frozenset({"metrics", "series"}),
    "whatif": frozenset(),
    "over_time": frozenset({"labels", "bin_s"}),
}
"""The fields each kind of figure reads (besides ``name`` and ``title``): a field given to a
kind that ignores it is refused when the scenario loads, not after it has run."""

CDF_METRICS = ("ttft_ms", "tpot_ms", "e2el_ms", "itl_ms")
"""What a ``cdf`` can draw: a per-request latency, or the pooled inter-token gaps."""


class FigureSpec(Closed):
    """One figure of the scenario, drawn by ``FIGURES[name]`` from its results; checked
    per kind when the scenario loads (:data:`FIGURE_FIELDS`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal[
        "cdf",
        "metrics_vs_param",
        "timeline",
        "iteration_times",
        "grouped_bars",
        "pareto",
        "whatif",
        "over_time",
    ]
    metric: str = "ttft_ms"
    """``cdf``: per-request field to plot (ttft_ms, tpot_ms, e2el_ms), or ``itl_ms``
    (the pooled inter-token latencies)."""
    param: str | None = None
    """``metrics_vs_param``: dotted scenario path on the x axis."""
    metrics: list[str] = Field(default_factory=list)
    """``metrics_vs_param``: summary metrics on the y axis; ``grouped_bars``: one panel
    each; ``pareto``: [throughput-like metric (more is better), latency-like metric
    (less is better)]."""
    series: str | None = None
    """``metrics_vs_param``: dotted scenario path splitting the variants into lines (one
    per value, e.g. ``admission.name``), with one panel per metric; ``series`` itself
    names the grid's series labels; ``pareto``: one colour per value."""
    variant: str | None = None
    """``timeline``: which variant's time series (default: the first)."""
    window_s: tuple[float, float] | None = None
    """``iteration_times``: the stretch of simulated time to draw (default: all)."""
    title: str | None = None
    log_x: bool = False
    log_y: bool | list[str] = False
    """Logarithmic value axes: all (true) or for the metrics listed
    (``metrics_vs_param`` with ``series``, ``grouped_bars``)."""
    reference: str | None = None
    """``metrics_vs_param`` with ``series``: a summary metric drawn as a dashed line on
    the first panel (its value in the first variant: e.g. a bound)."""
    tail: bool = False
    """``cdf``: draw the complementary CDF on a log scale (the tail, p90 to p99.9)."""
    labels: list[str] = Field(default_factory=list)
    """``over_time``: the variants drawn, in this order (default: every one)."""
    bin_s: PositiveFloat | None = None
    """``over_time``: width of the time bins of the arrival rate and the TTFT
    percentiles (default: the run in 100 bins)."""

    @model_validator(mode="after")
    def _fits_its_kind(self) -> FigureSpec:
        used = FIGURE_FIELDS[self.name]
        fields = type(self).model_fields
        extra = sorted(
            f
            for f in fields
            if f not in used
            and f not in ("name", "title")
            and getattr(self, f) != fields[f].get_default(call_default_factory=True)
        )  # (a field at its default is not "given": a dumped spec loads back)
        if extra:
            takes = ", ".join(sorted(used | {"title"}))
            raise ValueError(f"{self.name} does not use {', '.join(extra)} (it takes: {takes})")
        n = len(self.metrics)
        if self.name == "cdf" and self.metric not in CDF_METRICS:
            raise ValueError(f"metric: got {self.metric!r}, must be one of {list(CDF_METRICS)}")
        if self.name == "metrics_vs_param" and (self.param is None or n == 0):
            raise ValueError("metrics_vs_param needs param (a dotted scenario path) and metrics")
        if self.name == "grouped_bars" and n == 0:
            raise ValueError("grouped_bars needs metrics (one panel each)")
        if self.name == "pareto" and n != 2:
            raise ValueError(f"pareto needs metrics: [x, y] (two), got {n}")
        if self.reference is not None and self.series is None:
            raise ValueError("reference needs series (it is drawn on the series' first panel)")
        if isinstance(self.log_y, list) and not set(self.log_y) <= set(self.metrics):
            raise ValueError(f"log_y: got {self.log_y}, must name metrics of {self.metrics}")
        return self

    def file_stem(self, scenario: str) -> str:
        if self.name == "cdf":
            return f"{scenario}_{self.metric.removesuffix('_ms')}_cdf"
        if self.name == "metrics_vs_param":
            return f"{scenario}_vs_{(self.param or 'param').split('.')[-1]}"
        if self.name == "iteration_times":
            return f"{scenario}_iterations"
        if self.name == "pareto":
            return f"{scenario}_pareto_{(self.metrics or ['', 'none'])[-1].removesuffix('_ms')}"
        if self.name == "grouped_bars":
            return f"{scenario}_bars_{(self.metrics or ['none'])[0].removesuffix('_ms')}"
        if self.name == "whatif":
            return f"{scenario}_speedups"
        if self.name == "over_time":
            return f"{scenario}_over_time"
        return f"{scenario}_timeline_{self.variant or 'first'}"
