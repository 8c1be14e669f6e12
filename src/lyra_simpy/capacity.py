"""Capacity planning: the highest request rate, or the fewest replicas, that keeps SLO
attainment at or above a target — goodput as DistServe (Zhong et al., OSDI 2024) defines
it: the maximum rate served with at least the target fraction of requests meeting every
SLO.

Attainment at a point is ``slo_attainment`` (:mod:`lyra_simpy.metrics.summary`: good
requests / all arrivals) averaged over *seeds* runs — the scenario's seed + 0 … n-1,
the same seeds at every point (common random numbers), run in parallel on the sweep's
executor (:mod:`lyra_simpy.sweep.executors`).

``vary="arrival.rate"`` (``workload.arrival.rate_per_s``): probe the scenario's rate;
double it while the mean attainment meets the target, or halve it until it does (at most
*max_steps* times); then bisect between the highest passing and the lowest failing rate
until they are within *tolerance* of each other (relative). The answer is the highest
probed rate whose mean attainment meets the target.

``vary="cluster.replicas"``: the fewest replicas meeting the target at the scenario's
rate, by doubling from the scenario's count (or 1) and integer bisection.

Spread: each seed is then bisected on its own, to the same tolerance, starting from the
bracket the shared probes give it — the highest probed rate up to which that seed met the
target at every probe, and the next probe above (for replicas: the fewest from which on
it did, and the next below). The per-seed answers' range is the answer's spread; their
extra runs are kept in ``runs`` but not in the curve, which holds only points run with
every seed. Both searches assume attainment falls as load rises (rises with replicas);
the curve of every probe is kept so a case where it does not is seen. A scenario's own
``variants:``/``grid:`` are ignored: the search runs its base.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from lyra_simpy.errors import ScenarioError
from lyra_simpy.metrics.summary import number
from lyra_simpy.scenario import Scenario
from lyra_simpy.sweep.executors import Executor, open_executor, simulate_summary

#: What can be varied: the name on the command line → the scenario field and its unit.
VARY = {
    "arrival.rate": ("workload.arrival.rate_per_s", "req/s"),
    "cluster.replicas": ("cluster.replicas", "replicas"),
}
ROUNDING_SLACK = 1e-12
"""A mean of attainments that equals the target up to float rounding meets it."""


@dataclass(frozen=True)
class Probe:
    """The runs at one value *x* of the varied field, one per seed."""

    x: float
    attainment: tuple[float, ...]
    goodput_req_s: tuple[float, ...]
    """``request_goodput`` of each seed's run."""

    @property
    def mean(self) -> float:
        return statistics.fmean(self.attainment)


@dataclass
class Capacity:
    """A finished search: every run, the answer and each seed's answer."""

    vary: str
    target: float
    slo: dict[str, float | None]
    seeds: list[int]
    runs: dict[tuple[float, int], tuple[float, float]] = field(default_factory=dict)
    """(x, seed index) → (SLO attainment, request goodput) of every run made."""
    answer: float | None = None
    per_seed: list[float | None] = field(default_factory=list)
    note: str = ""
    """Why there is no answer (None), when there is none."""

    @property
    def unit(self) -> str:
        return VARY[self.vary][1]

    def meets(self, attainment: float) -> bool:
        return attainment >= self.target - ROUNDING_SLACK

    def probes_x(self) -> list[float]:
        """Every value of the varied field run with any seed, sorted."""
        return sorted({x for x, _ in self.runs})

    def curve(self) -> list[Probe]:
        """The points run with every seed, sorted by *x*."""
        xs = self.probes_x()
        n = len(self.seeds)
        return [
            Probe(
                x,
                tuple(self.runs[x, s][0] for s in range(n)),
                tuple(self.runs[x, s][1] for s in range(n)),
            )
            for x in xs
            if all((x, s) in self.runs for s in range(n))
        ]

    def seed_bracket(self, s: int) -> tuple[float | None, float | None]:
        """(answer, the first probe past it that fails) of seed *s* from its runs, walking
        from light to heavy load; None where there is none."""
        xs = sorted(x for x, i in self.runs if i == s)
        if self.vary == "cluster.replicas":
            xs.reverse()
        best = None
        for x in xs:
            if not self.meets(self.runs[x, s][0]):
                return best, x
            best = x
        return best, None


def _check(scenario: Scenario, vary: str) -> float:
    """The varied field's value in *scenario* (where the search starts)."""
    if vary not in VARY:
        raise ScenarioError(f"--vary: got {vary!r}, must be one of {sorted(VARY)}")
    if vary == "arrival.rate":
        rate = getattr(scenario.workload.arrival, "rate_per_s", None)
        if rate is None:
            raise ScenarioError(
                f"workload.arrival: got {scenario.workload.arrival.name!r} without rate_per_s, "
                "must be poisson, gamma, constant or a trace with rate_per_s to vary its rate"
            )
        return float(rate)
    cluster = scenario.cluster
    if cluster is not None and (cluster.groups or cluster.disaggregation is not None):
        raise ScenarioError(
            "cluster: got groups or disaggregation, must be plain replicas to vary their count"
        )
    return float(cluster.replicas if cluster is not None else 1)


class _Search:
    def __init__(self, cap: Capacity, scenario: Scenario, executor: Executor) -> None:
        self.cap, self.scenario, self.executor = cap, scenario, executor

    def run(self, pairs: list[tuple[float, int]]) -> None:
        """Simulate every (x, seed index) not run yet, in parallel."""
        cap = self.cap
        todo = sorted({(float(x), s) for x, s in pairs if (x, s) not in cap.runs})
        path = VARY[cap.vary][0]
        runs = [
            self.scenario.with_values(
                {path: int(x) if cap.vary == "cluster.replicas" else x, "seed": cap.seeds[s]},
                where="capacity",
            )
            for x, s in todo
        ]
        for i, result in self.executor.run(simulate_summary, runs):
            summary = result["summary"]
            cap.runs[todo[i]] = (
                number(summary["slo_attainment"]),
                number(summary["request_goodput"]),
            )

    def meets(self, x: float) -> bool:
        """Whether the mean attainment over the seeds at *x* meets the target."""
        n = len(self.cap.seeds)
        self.run([(x, s) for s in range(n)])
        return self.cap.meets(statistics.fmean(self.cap.runs[x, s][0] for s in range(n)))


def _bracket_rate(search: _Search, start: float, max_steps: int) -> tuple[float, float] | None:
    cap = search.cap
    lo, hi = (start, None) if search.meets(start) else (None, start)
    for _ in range(max_steps):
        if lo is not None and hi is not None:
            return lo, hi
        if hi is None:
            x = lo * 2  # type: ignore[operator]
            lo, hi = (x, None) if search.meets(x) else (lo, x)
        else:
            x = hi / 2
            lo, hi = (x, hi) if search.meets(x) else (None, x)
    if lo is not None and hi is not None:
        return lo, hi
    cap.note = (
        f"mean attainment stays {'below' if lo is None else 'at or above'} {cap.target:g} "
        f"{'down' if lo is None else 'up'} to {hi if lo is None else lo:.4g} {cap.unit} "
        f"after {max_steps} {'halvings' if lo is None else 'doublings'} of the scenario's rate"
    )
    return None


def _bracket_replicas(search: _Search, start: int, max_steps: int) -> tuple[int, int] | None:
    if search.meets(start):
        return 0, start  # no replicas serve nothing
    lo = start
    for _ in range(max_steps):
        if search.meets(lo * 2):
            return lo, lo * 2
        lo *= 2
    search.cap.note = f"mean attainment stays below {search.cap.target:g} up to {lo} replicas"
    return None


def _narrow(cap: Capacity, lo: float, hi: float, tolerance: float) -> float | None:
    """The next point to probe between passing *lo* and failing *hi* (for replicas:
    failing *lo*, passing *hi*), or None when the bracket is narrow enough."""
    if cap.vary == "cluster.replicas":
        return (int(lo) + int(hi)) // 2 if hi - lo > 1 else None
    return (lo + hi) / 2 if (hi - lo) / lo > tolerance else None


def _seed_step(cap: Capacity, s: int, tolerance: float) -> float | None:
    """Seed *s*'s next probe: widen its bracket (as the shared search did) while one end
    is missing, else bisect it; None when it is narrow enough."""
    best, past = cap.seed_bracket(s)
    if cap.vary == "cluster.replicas":
        if best is None:
            return 2 * past  # type: ignore[operator]
        return _narrow(cap, past or 0, best, tolerance)
    if best is None:
        return past / 2  # type: ignore[operator]
    if past is None:
        return best * 2
    return _narrow(cap, best, past, tolerance)


def _bisect_seeds(search: _Search, tolerance: float, max_steps: int) -> None:
    """Bisect every seed on its own from its bracket, all seeds' probes in parallel."""
    cap = search.cap
    widened = [0] * len(cap.seeds)
    while True:
        pairs = []
        for s in range(len(cap.seeds)):
            x = _seed_step(cap, s, tolerance)
            if x is not None and None in cap.seed_bracket(s):
                widened[s] += 1
                if widened[s] > max_steps:
                    continue
            if x is not None:
                pairs.append((float(x), s))
        if not pairs:
            break
        search.run(pairs)
    cap.per_seed = [cap.seed_bracket(s)[0] for s in range(len(cap.seeds))]


def find_capacity(
    scenario: Scenario,
    target: float,
    vary: str = "arrival.rate",
    slo: dict[str, float] | None = None,
    seeds: int = 3,
    tolerance: float = 0.02,
    workers: int | None = None,
    dask: Any = None,
    max_steps: int = 20,
) -> Capacity:
    """Search *scenario* for its capacity (see the module docstring).

    Parameters
    ----------
    target
        SLO attainment to keep, a fraction in (0, 1].
    vary
        ``"arrival.rate"`` (highest rate) or ``"cluster.replicas"`` (fewest replicas).
    slo
        Replaces the scenario's ``slo:`` block (``{"ttft_ms": 300, ...}``); None keeps it.
    seeds, tolerance, workers, dask, max_steps
        Runs per probe; relative width of the final rate bracket; the executor (as for
        sweeps); doublings or halvings allowed while bracketing.
    """
    if not 0 < target <= 1:
        raise ScenarioError(f"--attainment: got {target}, must be in (0, 1]")
    if seeds < 1:
        raise ScenarioError(f"--seeds: got {seeds}, must be >= 1")
    if not 0 < tolerance < 1:
        raise ScenarioError(f"--tolerance: got {tolerance}, must be in (0, 1)")
    start = _check(scenario, vary)
    if slo is not None:
        scenario = scenario.with_values({"slo": dict(slo)}, where="--slo")
    limits = scenario.slo.model_dump()
    if all(v is None for v in limits.values()):
        raise ScenarioError("slo: none set, must set one (--slo ttft=300,tpot=40)")
    cap = Capacity(vary, target, limits, [scenario.seed + i for i in range(seeds)])
    with open_executor(workers, dask) as executor:
        search = _Search(cap, scenario, executor)
        bracket: tuple[float, float] | None
        if vary == "arrival.rate":
            bracket = _bracket_rate(search, start, max_steps)
        else:
            bracket = _bracket_replicas(search, int(start), max_steps)
        if bracket is not None:
            lo, hi = bracket
            while (mid := _narrow(cap, lo, hi, tolerance)) is not None:
                passed = search.meets(float(mid))
                if vary == "arrival.rate":
                    lo, hi = (mid, hi) if passed else (lo, mid)
                else:
                    lo, hi = (lo, mid) if passed else (mid, hi)
            cap.answer = float(lo if vary == "arrival.rate" else hi)
        _bisect_seeds(search, tolerance, max_steps)
    return cap
