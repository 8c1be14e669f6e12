"""Lab 02's published tables, cell by cell, on the full runs (400 requests × 7 runs,
about half a second): every cell within 10 %, p99 TTFT within 20 %, a cell printed as 0
below 0.5. The targets and the tolerance rule are those the workload search used
(``validation/lab02_fit.py``); the cells the package does not reproduce yet are
strict xfails naming the reason (docs/guide/lab02.md), so one that starts passing
fails the suite and is promoted. The queueing cells (TTFT, goodput at saturated
depths) move with the arrival seed: each must also hold the lab's value inside the
simulator's band over 20 seeds (the workload search ranks on a median over seeds).
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _fit_module() -> Any:
    spec = importlib.util.spec_from_file_location("lab02_fit", ROOT / "validation" / "lab02_fit.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fit = _fit_module()

# 20 seeds of both lab scenarios (140 runs): numbers, not lines. Coverage's tracer would
# make them three times as long (47 s against 13 s on a 2-core VM) for code the unit
# tests trace already.
pytestmark = pytest.mark.no_cover

SEED_NOISE = (
    "a queueing cell that moves with the arrival seed; the lab's value lies inside the "
    "simulator's band over 20 seeds (test_lab02_queueing_cells_inside_the_seed_band)"
)
KNOWN_MISSES = {
    ("continuous", "p99_ttft_ms"): SEED_NOISE,
    ("4", "goodput_token_throughput"): SEED_NOISE,
    ("8", "goodput_token_throughput"): SEED_NOISE,
}
QUEUEING = [
    ("static", "median_ttft_ms"),
    ("static", "p99_ttft_ms"),
    ("continuous", "median_ttft_ms"),
    ("continuous", "p99_ttft_ms"),
    ("4", "goodput_token_throughput"),
    ("8", "goodput_token_throughput"),
    ("16", "goodput_token_throughput"),
]
"""Cells set by the arrival realisation's queueing (TTFT, goodput of a saturated or
nearly saturated depth): the lab printed one realisation."""


@cache
def seed_runs() -> list[dict[tuple[str, str], float]]:
    """Every cell at the files' seed and the 19 after it (the first is the files' own)."""
    return fit.seed_runs(None, fit.BAND_SEEDS)


def cells() -> dict[tuple[str, str], float]:
    """Every cell of both tables, from the scenario files as committed."""
    return seed_runs()[0]


def test_the_band_starts_at_the_scenario_files_seed():
    for path in (fit.STATIC, fit.GOODPUT):
        assert yaml.safe_load(path.read_text())["seed"] == fit.SEED


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


def seed_band() -> dict[tuple[str, str], list[float]]:
    return fit.band(seed_runs())


@pytest.mark.parametrize(("label", "metric"), QUEUEING, ids=[f"{a}-{b}" for a, b in QUEUEING])
def test_lab02_queueing_cells_inside_the_seed_band(label: str, metric: str) -> None:
    """The lab's value lies between the 2nd smallest and the 2nd largest of the
    simulator's values over 20 seeds (a 5-95 % band)."""
    values = seed_band()[label, metric]
    assert values[1] <= fit.TARGETS[label, metric] <= values[-2], (values[1], values[-2])


def test_seeds_within_tolerance_counts_the_cells_a_single_run_would_pass():
    # lab02_fit.py's last column: 35 and 39 are within 10 % of 36, 40 and 30 are not
    assert fit.within_tolerance("goodput_token_throughput", 36, [35, 39, 40, 30]) == 2
    # p99 TTFT's tolerance is 20 %; a 0 target is met up to 0.5
    assert fit.within_tolerance("p99_ttft_ms", 1669, [1336, 1335]) == 1
    assert fit.within_tolerance("goodput_token_throughput", 0, [0.0, 0.49, 0.51]) == 2


BESIDE = {"scheduler": "beside", "pad_prefill": False, "rate_per_s": 2.8,
          "output": "normal 135 75"}  # fmt: skip
"""``lab02_fit.py --beside``'s best point (docs/guide/lab02.md, "What the tables say
about prompts")."""


def test_the_saturated_cells_rule_out_prompts_that_stall_the_decodes():
    # docs/guide/lab02.md: at depths 4 and 8 the lab's throughput (209, 337) and its p50
    # TPOTs (31) lie above every seed's of the files' reading, where a prompt's iteration
    # costs the running requests their time (20 seeds; depth 4's decode alone is 210.5)
    band = seed_band()
    assert band["4", "output_throughput"][-1] < 207 < fit.TARGETS["4", "output_throughput"]
    assert band["8", "output_throughput"][-1] < 333 < fit.TARGETS["8", "output_throughput"]
    for label in ("static", "continuous"):
        assert band[label, "median_tpot_ms"][0] > 31.5  # the lab prints 31
    # with the prompts beside the decodes (--beside's best point, the files' seed) they
    # come out as printed: decode-bound depths at their pure decode rate, TPOT 31
    beside = fit.run_lab(BESIDE)
    assert beside["4", "output_throughput"] == pytest.approx(209, rel=0.005)
    assert beside["8", "output_throughput"] == pytest.approx(337, rel=0.01)
    for label in ("static", "continuous"):
        assert round(beside[label, "median_tpot_ms"]) == 31


def test_the_searches_are_one_at_a_time():
    # --band-only, --fine and --beside each pick what is searched: two at once is refused
    for pair in (["--fine", "--beside"], ["--band-only", "--beside"]):
        with pytest.raises(SystemExit) as info:
            fit.main(pair)
        assert info.value.code == 2
