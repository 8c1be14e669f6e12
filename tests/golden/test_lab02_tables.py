"""Lab 02's published tables, cell by cell, on the full runs (400 requests × 7 runs,
about half a second): every cell within 10 %, p99 TTFT within 20 %, a cell printed as 0
below 0.5. The targets and the tolerance rule are those the workload search used
(``validation/lab02_fit.py``); the cells the package does not reproduce yet are
strict xfails naming the reason (docs/guide/lab02.md), so one that starts passing
fails the suite and is promoted.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _fit_module() -> Any:
    spec = importlib.util.spec_from_file_location("lab02_fit", ROOT / "validation" / "lab02_fit.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fit = _fit_module()

STATIC_TTFT = (
    "with one prefill per iteration static's throughput and TPOT match; its queue still "
    "waits ~20 % less than the lab's (p50 28.6 s vs 35.8 s, p99 56 s vs 75 s)"
)
GOODPUT_TAIL = "a handful of requests meet the SLO before the queue builds: seed noise"
KNOWN_MISSES = {
    ("static", "median_ttft_ms"): STATIC_TTFT,
    ("static", "p99_ttft_ms"): STATIC_TTFT,
    ("continuous", "median_ttft_ms"): (
        "a prefill iteration at the padded width (31 ms) plus the wait for the running one "
        "gives ~49 ms against the lab's 33"
    ),
    ("continuous", "p99_ttft_ms"): "the lab's queueing tail is longer (1669 ms vs ~840 ms)",
    ("4", "goodput_token_throughput"): GOODPUT_TAIL,
}


@cache
def cells() -> dict[tuple[str, str], float]:
    """Every cell of both tables, from the scenario files as committed."""
    return fit.scenario_cells()


@pytest.mark.parametrize(
    ("label", "metric"),
    [
        pytest.param(
            label,
            metric,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[label, metric])]
            if (label, metric) in KNOWN_MISSES
            else [],
            id=f"{label}-{metric}",
        )
        for label, metric in fit.TARGETS
    ],
)
def test_lab02_cell(label: str, metric: str) -> None:
    target = fit.TARGETS[label, metric]
    value = cells()[label, metric]
    assert fit.cell_error(metric, target, value) <= 1.0, f"lab {target}, simulated {value:.1f}"
