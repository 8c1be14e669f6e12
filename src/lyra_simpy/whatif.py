"""What-if scoring: candidate server configurations × benchmark workloads.

A team that must make a server faster asks which change pays before spending GPU hours
on it. A scenario's ``whatif:`` block names the benchmark's *workloads* (each a labelled
change of the scenario, e.g. its lengths and concurrency, in a *group* such as
``sequential`` or ``concurrent``) and the *candidates* (labelled changes of the serving
configuration; ``baseline`` names the reference, by default the first). Every candidate
runs every workload under the scenario's seed, so the same requests reach each
candidate; the runs are labelled ``<candidate>.<workload>``.

Scoring, as the benchmark it models states it (issue 16, the SGLang/Qwen3.5-4B/B200
benchmark's rules), every number a field of :class:`ScoreRule`:

- A/B/A (``aba``, default on): the baseline runs a second time after the candidates,
  labelled ``<baseline>_after.<workload>``; the baseline's value of a workload is the
  median of its sessions (of two, their mean). Each run is its own replay session: with
  step-time noise (``cost.jitter``, :mod:`lyra_simpy.cost.jitter`) the what-if sets
  ``cost.jitter.session`` to the run's position (baseline 0, candidates in file order,
  the second baseline last), so every session draws distinct noise on the same requests;
- speedup of a workload = the baseline's ``metric`` over the candidate's (for a
  "higher is better" metric such as ``output_throughput``, the inverse); the default
  metric, ``duration``, is the wall time to serve the workload's requests;
- per group (class), the geometric mean of its workloads' speedups;
- a group's credit maps its geomean linearly from ``floor_speedup`` (1.02: the live-zero
  anchor, credit 0 at and below it) to ``full_speedup`` (2.0: credit 1, and capped
  there);
- aggregate = min(uncapped, ``base`` + ``weight`` × the weakest group's credit), the
  uncapped aggregate being the mean of the group credits (``uncapped: mean``, our
  reading of the rules' "capped at"; ``max`` takes the strongest group's credit).
  Parity (every speedup 1) gives exactly 0;
- regression gates, each giving 0: a group geomean below 1 / ``class_gate`` (1.02), or
  one workload slower than the baseline by more than ``noise_band`` (its speedup below
  1 / (1 + ``noise_band``)).

The benchmark's correctness gate (outputs that stop matching the baseline's, a failed
launch) cannot be simulated: a simulated run has no outputs to compare.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, NonNegativeFloat, PositiveFloat, model_validator

from lyra_simpy.config import Closed
from lyra_simpy.metrics.summary import number
from lyra_simpy.output.tables import format_table
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
    """Credit per group, the aggregate and the gates (defaults: the SGLang-on-B200
    benchmark's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    floor_speedup: PositiveFloat = 1.02
    """Geomean speedup earning no credit (and below): the live-zero anchor."""
    full_speedup: PositiveFloat = 2.0
    """Geomean speedup earning full credit (and above: credit is capped at 1)."""
    base: NonNegativeFloat = 0.30
    """The cap on the aggregate is ``base + weight ×`` the weakest group's credit."""
    weight: NonNegativeFloat = 0.70
    """See *base*."""
    uncapped: Literal["mean", "max"] = "mean"
    """The aggregate before the cap: the mean of the group credits (default, our
    reading of the rules' "capped at") or the strongest group's credit."""
    class_gate: PositiveFloat = 1.02
    """A group geomean below ``1 / class_gate`` (a regression beyond the live-zero
    anchor, mirrored) scores 0."""
    noise_band: NonNegativeFloat = 0.05
    """A single workload slower than the baseline by more than this fraction (speedup
    below ``1 / (1 + noise_band)``) scores 0. ASSUMED 5 %: the rules tolerate "measured
    replay noise" without a number; one workload's run-to-run spread on a live server
    is a few per cent, wider than a group's geomean (which the 2 % class gate bounds)."""

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

    def gate(self, geomeans: Mapping[str, float], speedups: Mapping[str, float]) -> str | None:
        """Why the score is 0 whatever the credits (None: no gate trips)."""
        for group, geo in geomeans.items():
            if not geo >= 1.0 / self.class_gate:  # (NaN trips it too)
                return f"class {group} {geo:.3f}x < 1/{self.class_gate:g}"
        for work, sp in speedups.items():
            if not sp >= 1.0 / (1.0 + self.noise_band):
                return f"workload {work} {sp:.3f}x < 1/(1+{self.noise_band:g})"
        return None

    def aggregate(self, credits: Sequence[float]) -> float:
        """min(uncapped, base + weight × the weakest credit)."""
        uncapped = sum(credits) / len(credits) if self.uncapped == "mean" else max(credits)
        return min(uncapped, self.base + self.weight * min(credits))


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
    aba: bool = True
    """Run the baseline again after the candidates (A/B/A) and score against the
    median of its sessions per workload."""

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
        if self.aba and self.after in names:
            raise ValueError(
                f"candidates: got {self.after!r}, the label of the second baseline "
                "session (aba: true); rename it"
            )
        return self

    @property
    def after(self) -> str:
        """Label of the second baseline session."""
        return f"{self.reference}_after"

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

    def variants(self, noisy: bool = False) -> list[Variant]:
        """One run per (candidate, workload), candidate-major, labelled
        ``<candidate>.<workload>``, then (``aba``) the baseline's second session; a
        candidate's changes apply after the workload's. *noisy* (the scenario's cost
        has a ``jitter``): each candidate's runs are session *k* (its position in this
        order: the baseline's first session is its place in the list, the second one
        comes last), set as ``cost.jitter.session``."""
        sessions = list(self.candidates)
        if self.aba:
            ref = next(c for c in self.candidates if c.label == self.reference)
            sessions.append(Variant(label=self.after, set=ref.set))
        out = []
        for k, c in enumerate(sessions):
            for w in self.workloads:
                sets = {**w.set, **c.set}
                if noisy:
                    sets["cost.jitter.session"] = k
                out.append(Variant(label=f"{c.label}.{w.label}", set=sets))
        return out


@dataclass(frozen=True)
class Scorecard:
    """Speedups per (candidate, workload), geomeans and credits per (candidate, group),
    gates and scores."""

    whatif: WhatIf
    values: dict[str, dict[str, float]]
    """candidate → workload → the metric's value (the baseline's: the median of its
    sessions)."""
    sessions: dict[str, list[float]]
    """workload → the baseline's value in each session, in run order."""
    speedups: dict[str, dict[str, float]]
    geomeans: dict[str, dict[str, float]]
    credits: dict[str, dict[str, float]]
    gates: dict[str, str | None]
    """candidate → the regression gate that zeroed its score (None: none)."""
    scores: dict[str, float]

    @property
    def groups(self) -> list[str]:
        return list(self.whatif.groups)


def scorecard(whatif: WhatIf, summaries: Sequence[Mapping[str, Any]]) -> Scorecard:
    """Score the *summaries* of the runs of ``whatif.variants()``, in that order."""
    sessions_run = len(whatif.candidates) + (1 if whatif.aba else 0)
    if len(summaries) != sessions_run * len(whatif.workloads):
        raise ValueError(
            f"got {len(summaries)} runs, must be one per candidate and workload "
            f"({sessions_run} x {len(whatif.workloads)})"
        )
    metric = whatif.metric
    workloads = whatif.workloads
    runs = iter(summaries)
    measured = [
        {w.label: number(next(runs)[metric]) for w in workloads} for _ in range(sessions_run)
    ]
    labels = [c.label for c in whatif.candidates]
    first = labels.index(whatif.reference)
    baseline_runs = [measured[first]] + ([measured[-1]] if whatif.aba else [])
    sessions = {w.label: [run[w.label] for run in baseline_runs] for w in workloads}
    ref = {w: statistics.median(vals) for w, vals in sessions.items()}
    values = {label: measured[i] for i, label in enumerate(labels)}
    values[whatif.reference] = dict(ref)
    rule = whatif.score
    speedups: dict[str, dict[str, float]] = {}
    geomeans: dict[str, dict[str, float]] = {}
    credits: dict[str, dict[str, float]] = {}
    gates: dict[str, str | None] = {}
    scores: dict[str, float] = {}
    for cand, vals in values.items():
        sp = {w: _speedup(ref[w], v, metric in HIGHER_IS_BETTER) for w, v in vals.items()}
        speedups[cand] = sp
        geo = {
            g: math.exp(sum(math.log(sp[w]) for w in members) / len(members))
            for g, members in whatif.groups.items()
        }
        geomeans[cand] = geo
        credits[cand] = {g: rule.credit(x) for g, x in geo.items()}
        gates[cand] = rule.gate(geo, sp)
        scores[cand] = 0.0 if gates[cand] else rule.aggregate(list(credits[cand].values()))
    return Scorecard(whatif, values, sessions, speedups, geomeans, credits, gates, scores)


def _speedup(reference: float, value: float, higher_is_better: bool) -> float:
    if reference <= 0 or value <= 0:
        return math.nan
    return value / reference if higher_is_better else reference / value


def format_scorecard(card: Scorecard) -> str:
    """The speedup table: one row per candidate, a column per workload, the group
    geomeans, the score and the gate that zeroed it."""

    workloads = [w.label for w in card.whatif.workloads]
    headers = ["candidate", *workloads, *(f"geo_{g}" for g in card.groups), "score", "gate"]
    rows = [
        [
            cand,
            *(f"{card.speedups[cand][w]:.3f}x" for w in workloads),
            *(f"{card.geomeans[cand][g]:.3f}x" for g in card.groups),
            f"{card.scores[cand]:.3f}",
            card.gates[cand] or "-",
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
        "baseline_sessions": card.sessions,
        "geomeans": card.geomeans,
        "credits": card.credits,
        "gates": card.gates,
        "scores": card.scores,
    }
    (folder / "whatif.json").write_text(json.dumps(doc, indent=2) + "\n")
