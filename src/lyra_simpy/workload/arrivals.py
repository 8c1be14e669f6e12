"""Arrival processes.

Open loop (times known up front, first request at t = 0 as vLLM's benchmark sends it):
``poisson`` (exponential gaps), ``gamma`` (gaps with the given coefficient of variation:
CV 1 is Poisson, larger is burstier; shape = 1/CV², as vLLM's ``--burstiness`` = 1/CV²),
``constant`` (evenly spaced), ``trace`` (a real trace's timestamps, optionally rescaled
to a target mean rate). Closed loop: ``closed_loop`` keeps *concurrency* requests in
flight.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt

from lyra_simpy.config import Closed
from lyra_simpy.workload.traces import TraceFormat

Floats = npt.NDArray[np.float64]


class _Arrival(Closed):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Random(_Arrival):
    exact_rate: bool = False
    """Stretch the drawn times so the *num_requests* requests arrive at exactly
    ``rate_per_s`` on average — (n − 1) / last arrival, as a trace's ``rate_per_s``
    rescales its window — keeping the gaps' relative sizes (their burstiness). Off: the
    times as drawn, whose realised rate strays from ``rate_per_s`` by about CV / √n
    (more, and mostly upward, for heavy-tailed gaps: gamma with CV 4 over 4000
    requests gave 4.8 req/s for 4.0). Needs ``num_requests``."""


class PoissonArrivals(_Random):
    name: Literal["poisson"] = "poisson"
    rate_per_s: PositiveFloat


class GammaArrivals(_Random):
    name: Literal["gamma"] = "gamma"
    rate_per_s: PositiveFloat
    cv: PositiveFloat
    """Coefficient of variation of the gaps (1 = Poisson)."""


class ConstantArrivals(_Arrival):
    name: Literal["constant"] = "constant"
    rate_per_s: PositiveFloat


class ClosedLoopArrivals(_Arrival):
    name: Literal["closed_loop"] = "closed_loop"
    concurrency: PositiveInt
    think_time_s: NonNegativeFloat = 0.0
    """Pause between a request's end and its client's next request."""


class TraceArrivals(_Arrival):
    """Replay a trace's arrival times (relative to its first row)."""

    name: Literal["trace"] = "trace"
    path: str
    """Trace file, relative to the scenario file."""
    format: TraceFormat = "azure"
    rate_per_s: PositiveFloat | None = None
    """Rescale the times so the replayed rows' mean rate is this (None: as recorded).
    The rate is measured over the replayed window — ``num_requests`` rows from
    ``skip_rows`` (all remaining rows without ``num_requests``) — as (rows − 1) / span,
    the same measure as a Poisson stream's first arrival at 0; ``duration_s`` then cuts
    the rescaled times."""
    skip_rows: int = Field(default=0, ge=0)
    """Rows to skip at the start of the trace."""


ArrivalConfig = Annotated[
    PoissonArrivals | GammaArrivals | ConstantArrivals | ClosedLoopArrivals | TraceArrivals,
    Field(discriminator="name"),
]


def _gaps(cfg: _Arrival, rng: np.random.Generator, n: int) -> Floats:
    if isinstance(cfg, PoissonArrivals):
        return rng.exponential(1.0 / cfg.rate_per_s, size=n)
    if isinstance(cfg, GammaArrivals):
        shape = 1.0 / cfg.cv**2
        return rng.gamma(shape, 1.0 / (cfg.rate_per_s * shape), size=n)
    if isinstance(cfg, ConstantArrivals):
        return np.full(n, 1.0 / cfg.rate_per_s)
    raise TypeError(f"{cfg!r} has no gap distribution")


def open_loop_times(
    cfg: PoissonArrivals | GammaArrivals | ConstantArrivals,
    rng: np.random.Generator,
    n: int | None,
    duration_s: float | None,
) -> Floats:
    """Arrival times from 0: *n* of them, or all before *duration_s* (or the fewer)."""
    if isinstance(cfg, ConstantArrivals):
        count = n if n is not None else int(np.ceil(duration_s * cfg.rate_per_s))  # type: ignore[operator]
        times = np.arange(count, dtype=np.float64) / cfg.rate_per_s
    elif n is not None:
        times = np.concatenate(([0.0], np.cumsum(_gaps(cfg, rng, n - 1))))
        if cfg.exact_rate and n > 1 and times[-1] > 0:
            times = times * ((n - 1) / times[-1] / cfg.rate_per_s)
    else:
        assert duration_s is not None
        chunks = [np.zeros(1)]
        last = 0.0
        block = max(64, int(duration_s * cfg.rate_per_s * 1.2))
        while last < duration_s:
            steps = last + np.cumsum(_gaps(cfg, rng, block))
            chunks.append(steps)
            last = float(steps[-1])
        times = np.concatenate(chunks)
    if duration_s is not None:
        times = times[times < duration_s]
    return np.asarray(times, dtype=np.float64)


def trace_times(cfg: TraceArrivals, trace_arrival_s: Floats, n: int | None = None) -> Floats:
    """The trace's times from ``skip_rows`` on (at most *n* rows), from 0, rescaled so
    that those rows arrive at ``rate_per_s`` on average."""
    t = trace_arrival_s[cfg.skip_rows :] - trace_arrival_s[cfg.skip_rows]
    if n is not None:
        t = t[:n]
    if cfg.rate_per_s is not None and len(t) > 1 and t[-1] > 0:
        observed = (len(t) - 1) / t[-1]
        t = t * (observed / cfg.rate_per_s)
    return np.asarray(t, dtype=np.float64)
