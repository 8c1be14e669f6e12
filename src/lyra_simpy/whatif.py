"""What-if scoring: candidate server configurations × benchmark workloads.

A team that must make a server faster asks which change pays before spending GPU hours
on it. A scenario's ``whatif:`` block names the benchmark's *workloads* (each a labelled
change of the scenario, e.g. its lengths and concurrency, in a *group* such as
``sequential`` or ``concurrent``) and the *candidates* (labelled changes of the serving
configuration; ``baseline`` names the reference, by default the first). Every candidate
runs every workload under the scenario's seed, so the same requests reach each
candidate; the runs are labelled ``<candidate>.<workload>``.

Scoring, as the benchmark it models states it:

- speedup of a workload = the baseline's ``metric`` over the candidate's (for a
  "higher is better" metric such as ``output_throughput``, the inverse); the default
  metric, ``duration``, is the wall time to serve the workload's requests;
- per group, the geometric mean of its workloads' speedups;
- a group's credit maps its geomean linearly from ``floor_speedup`` (credit 0) to
  ``full_speedup`` (credit 1), clipped to [0, 1];
- score = ``base`` + ``weight`` × the weakest group's credit.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, NonNegativeFloat, PositiveFloat, model_validator

from lyra_simpy.config import Closed
from lyra_simpy.metrics.summary import number
from lyra_simpy.variants import Variant

Metric = Literal[
    "duration",
    "mean_e2el_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
    "output_throughput",
    "request_throughput",
    "total_token_throughput",
]
HIGHER_IS_BETTER = ("output_throughput", "request_throughput", "total_token_throughput")


class WhatIfWorkload(Closed):
    """One benchmark workload: a labelled change of the scenario, in a scoring group."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    group: str
    """Scoring group (e.g. ``sequential``, ``concurrent``): speedups are averaged
    (geometric mean) within it."""
    set: dict[str, Any] = Field(default_factory=dict)


class ScoreRule(Closed):
    """Credit per group and the total (defaults: the SGLang-on-B200 benchmark's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    floor_speedup: PositiveFloat = 1.02
    """Geomean speedup earning no credit (and below)."""
    full_speedup: PositiveFloat = 2.0
    """Geomean speedup earning full credit (and above)."""
    base: NonNegativeFloat = 0.30
    """Score with no credit."""
    weight: NonNegativeFloat = 0.70
    """Score added at full credit of the weakest group."""

    @model_validator(mode="after")
    def _ordered(self) -> ScoreRule:
        if self.full_speedup <= self.floor_speedup:
            raise ValueError(
                f"full_speedup: got {self.full_speedup}, must be > floor_speedup "
                f"({self.floor_speedup})"
            )
        return self

    def credit(self, geomean: float) -> float:
        """Linear credit between the floor and full speedups, clipped to [0, 1]."""
        share = (geomean - self.floor_speedup) / (self.full_speedup - self.floor_speedup)
        return min(1.0, max(0.0, share))


class WhatIf(Closed):
    """Candidates × workloads, scored against a baseline candidate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workloads: Annotated[list[WhatIfWorkload], Field(min_length=1)]
    candidates: Annotated[list[Variant], Field(min_length=1)]
    baseline: str | None = None
    """Label of the reference candidate (default: the first)."""
    metric: Metric = "duration"
    """Summary metric a speedup compares (``duration``: wall time to serve the workload)."""
    score: ScoreRule = Field(default_factory=ScoreRule)

    @model_validator(mode="after")
    def _labels(self) -> WhatIf:
        for kind, labels in (
            ("workloads", [w.label for w in self.workloads]),
            ("candidates", [c.label for c in self.candidates]),
        ):
            for i, label in enumerate(labels):
                if label in labels[:i]:
                    raise ValueError(f"{kind}[{i}].label: got {label!r}, must be unique")
                if "." in label or "/" in label:
                    raise ValueError(f"{kind}[{i}].label: got {label!r}, must not hold '.' or '/'")
        names = [c.label for c in self.candidates]
        if self.baseline is not None and self.baseline not in names:
            raise ValueError(f"baseline: got {self.baseline!r}, must be one of {names}")
        return self

    @property
    def reference(self) -> str:
        return self.baseline or self.candidates[0].label

    @property
    def groups(self) -> dict[str, list[str]]:
        """Scoring group → the labels of its workloads, in file order."""
        out: dict[str, list[str]] = {}
        for w in self.workloads:
            out.setdefault(w.group, []).append(w.label)
        return out

    def variants(self) -> list[Variant]:
        """One run per (candidate, workload), candidate-major, labelled
        ``<candidate>.<workload>``; a candidate's changes apply after the workload's."""
        return [
            Variant(label=f"{c.label}.{w.label}", set={**w.set, **c.set})
            for c in self.candidates
            for w in self.workloads
        ]


@dataclass(frozen=True)
class Scorecard:
    """Speedups per (candidate, workload), geomeans per (candidate, group), scores."""

    whatif: WhatIf
    values: dict[str, dict[str, float]]
    """candidate → workload → the metric's value."""
    speedups: dict[str, dict[str, float]]
    geomeans: dict[str, dict[str, float]]
    scores: dict[str, float]

    @property
    def groups(self) -> list[str]:
        return list(self.whatif.groups)


def scorecard(whatif: WhatIf, summaries: Sequence[Mapping[str, Any]]) -> Scorecard:
    """Score the *summaries* of the runs of ``whatif.variants()``, in that order."""
    if len(summaries) != len(whatif.candidates) * len(whatif.workloads):
        raise ValueError(
            f"got {len(summaries)} runs, must be one per candidate and workload "
            f"({len(whatif.candidates)} x {len(whatif.workloads)})"
        )
    metric = whatif.metric
    workloads = whatif.workloads
    values: dict[str, dict[str, float]] = {}
    runs = iter(summaries)
    for c in whatif.candidates:
        values[c.label] = {w.label: number(next(runs)[metric]) for w in workloads}
    ref = values[whatif.reference]
    speedups: dict[str, dict[str, float]] = {}
    for cand, vals in values.items():
        speedups[cand] = {
            w: _speedup(ref[w], v, metric in HIGHER_IS_BETTER) for w, v in vals.items()
        }
    geomeans: dict[str, dict[str, float]] = {}
    scores: dict[str, float] = {}
    rule = whatif.score
    for cand, sp in speedups.items():
        geomeans[cand] = {
            g: math.exp(sum(math.log(sp[w]) for w in labels) / len(labels))
            for g, labels in whatif.groups.items()
        }
        weakest = min(rule.credit(geo) for geo in geomeans[cand].values())
        scores[cand] = rule.base + rule.weight * weakest
    return Scorecard(whatif, values, speedups, geomeans, scores)


def _speedup(reference: float, value: float, higher_is_better: bool) -> float:
    if reference <= 0 or value <= 0:
        return math.nan
    return value / reference if higher_is_better else reference / value


def format_scorecard(card: Scorecard) -> str:
    """The speedup table: one row per candidate, a column per workload, the group
    geomeans and the score."""
    from lyra_simpy.runner import format_table

    workloads = [w.label for w in card.whatif.workloads]
    headers = ["candidate", *workloads, *(f"geo_{g}" for g in card.groups), "score"]
    rows = [
        [
            cand,
            *(f"{card.speedups[cand][w]:.3f}x" for w in workloads),
            *(f"{card.geomeans[cand][g]:.3f}x" for g in card.groups),
            f"{card.scores[cand]:.3f}",
        ]
        for cand in card.speedups
    ]
    return format_table(headers, rows)


def write_scorecard(card: Scorecard, folder: Path) -> None:
    """``whatif.csv`` (one row per candidate and workload) and ``whatif.json``."""
    w = card.whatif
    group = {x.label: x.group for x in w.workloads}
    with (folder / "whatif.csv").open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["candidate", "workload", "group", w.metric, "speedup"])
        for cand, vals in card.values.items():
            for work, value in vals.items():
                out.writerow([cand, work, group[work], value, card.speedups[cand][work]])
    doc = {
        "metric": w.metric,
        "baseline": w.reference,
        "score_rule": w.score.model_dump(),
        "geomeans": card.geomeans,
        "scores": card.scores,
    }
    (folder / "whatif.json").write_text(json.dumps(doc, indent=2) + "\n")
