"""Load that changes over time: an arrival-rate schedule applied as a time warp.

A schedule gives a *factor* f(τ) ≥ 0 on the arrival rate at each time τ: ``step``
holds each point's factor until the next point, ``linear`` goes in a straight line from
one point's factor to the next's; after the last point its factor holds. The arrivals
are drawn as configured (Poisson, gamma, constant at ``rate_per_s``, or a trace's
times), and each time *s* of that base process is moved to τ = Λ⁻¹(s), where
Λ(τ) = ∫₀^τ f is the cumulative factor: the count of arrivals by τ is the base
process's count by Λ(τ), so the rate at τ is f(τ) × the base rate and the shape of the
gaps (gamma's CV, a trace's bursts) is kept — the standard construction of a
non-homogeneous process from a homogeneous one (Çinlar, *Introduction to Stochastic
Processes*, 1975, §4.7; for Poisson, Lewis & Shedler 1979). Factor 1 everywhere leaves
every time exactly as drawn. The map is applied chunk by chunk as the times are drawn
(:func:`~lyra_simpy.workload.arrivals.open_loop_times`), so memory stays bounded.

A process may change the factor while the run goes on
(:meth:`~lyra_simpy.processes.Cluster.scale_arrivals`): :meth:`Warp.hold_from` keeps
Λ up to now and holds the new factor after it, and the arrivals not yet due move.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, Field, NonNegativeFloat, model_validator

from lyra_simpy.config import Closed

Floats = npt.NDArray[np.float64]


class RatePoint(Closed):
    """From *at_s* on, the arrival rate is *factor* × the workload's own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: NonNegativeFloat
    factor: NonNegativeFloat


class RateSchedule(Closed):
    """``workload.rate_schedule``: the arrival rate's factor over time (see the module
    docstring). E.g. load doubling for ten minutes after the first hour::

        rate_schedule:
          points: [{at_s: 0, factor: 1}, {at_s: 3600, factor: 2}, {at_s: 4200, factor: 1}]
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    shape: Literal["step", "linear"] = "step"
    """``step``: each factor holds until the next point; ``linear``: straight lines
    between the points' factors (a ramp)."""
    points: Annotated[list[RatePoint], Field(min_length=1)]
    """Times from 0, increasing; the last factor holds after the last point."""

    @model_validator(mode="after")
    def _ordered(self) -> RateSchedule:
        pts = self.points
        if pts[0].at_s != 0:
            raise ValueError(f"points[0].at_s: got {pts[0].at_s}, must be 0 (the run's start)")
        for i in range(1, len(pts)):
            if pts[i].at_s <= pts[i - 1].at_s:
                raise ValueError(
                    f"points[{i}].at_s: got {pts[i].at_s}, must be > points[{i - 1}].at_s "
                    f"({pts[i - 1].at_s})"
                )
        if pts[-1].factor <= 0:
            raise ValueError(
                f"points[{len(pts) - 1}].factor: got {pts[-1].factor}, must be > 0 (the last "
                "factor holds for ever: with 0 the arrivals after it would never come)"
            )
        return self

    def warp(self) -> Warp:
        """The time warp of this schedule."""
        pts = self.points
        starts = [p.at_s for p in pts]
        factors = [p.factor for p in pts]
        slopes = [0.0] * len(pts)
        if self.shape == "linear":
            for k in range(len(pts) - 1):
                slopes[k] = (factors[k + 1] - factors[k]) / (starts[k + 1] - starts[k])
        return Warp(starts, factors, slopes)


class Warp:
    """Λ as segments: from ``starts[k]`` the factor is ``factors[k] + slopes[k] × (τ −
    starts[k])`` (until the next segment; the last one goes on for ever)."""

    def __init__(self, starts: list[float], factors: list[float], slopes: list[float]) -> None:
        self.starts = np.array(starts, dtype=np.float64)
        self.factors = np.array(factors, dtype=np.float64)
        self.slopes = np.array(slopes, dtype=np.float64)
        self.slopes[-1] = 0.0
        lengths = np.diff(self.starts)
        head = self.factors[:-1] * lengths + self.slopes[:-1] * lengths * lengths / 2.0
        self.cumulative_at = np.concatenate(([0.0], np.cumsum(head)))
        """Λ at each segment's start."""

    @classmethod
    def identity(cls) -> Warp:
        """Factor 1 for ever: every time stays as it is."""
        return cls([0.0], [1.0], [0.0])

    def cumulative(self, t_s: float) -> float:
        """Λ(*t_s*): the base process's time when the warped clock reads *t_s*."""
        return float(self.cumulative_many(np.array([t_s], dtype=np.float64))[0])

    def cumulative_many(self, t_s: Floats) -> Floats:
        """Λ of each time of *t_s*."""
        k = np.searchsorted(self.starts, t_s, side="right") - 1
        x = t_s - self.starts[k]
        out = self.cumulative_at[k] + self.factors[k] * x + self.slopes[k] * x * x / 2.0
        return np.asarray(out, dtype=np.float64)

    def inverse(self, base_s: Floats) -> Floats:
        """Λ⁻¹ of the base times *base_s*: the warped arrival times (non-decreasing when
        *base_s* is; a stretch of factor 0 is skipped over)."""
        k = np.searchsorted(self.cumulative_at, base_s, side="right") - 1
        y = base_s - self.cumulative_at[k]
        f = self.factors[k]
        # x with f x + g x²/2 = y, in the form without cancellation (g = 0: y / f)
        # (a ramp down may round the root's argument a hair below 0 at its end)
        den = f + np.sqrt(np.maximum(f * f + 2.0 * self.slopes[k] * y, 0.0))
        x = np.divide(2.0 * y, den, out=np.zeros_like(y), where=den > 0)
        return np.asarray(self.starts[k] + x, dtype=np.float64)

    def hold_from(self, now_s: float, factor: float) -> Warp:
        """This warp up to *now_s*, then *factor* for ever."""
        keep = int(np.searchsorted(self.starts, now_s, side="left"))
        starts = [*self.starts[:keep].tolist(), now_s]
        factors = [*self.factors[:keep].tolist(), factor]
        slopes = [*self.slopes[:keep].tolist(), 0.0]
        warp = Warp(starts, factors, slopes)
        # Λ(now) exactly as this warp gives it (the new segment starts where it is)
        warp.cumulative_at[-1] = self.cumulative(now_s)
        return warp
