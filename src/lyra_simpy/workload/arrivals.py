"""Arrival processes.

Open loop (times known up front, first request at t = 0 as vLLM's benchmark sends it):
``poisson`` (exponential gaps), ``gamma`` (gaps with the given coefficient of variation:
CV 1 is Poisson, larger is burstier; shape = 1/CV², as vLLM's ``--burstiness`` = 1/CV²),
``constant`` (evenly spaced), ``trace`` (a real trace's timestamps, optionally rescaled
to a target mean rate). Closed loop: ``closed_loop`` keeps *concurrency* requests in
flight; with a ``path`` it sends a trace's rows in trace order (lengths ``trace``), so a
closed-loop run can be simulated with the exact requests a real run sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt

from lyra_simpy.config import Closed
from lyra_simpy.workload.rate import Warp
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
    path: str | None = None
    """A trace whose rows are sent in order, request *k* with row ``skip_rows + k``'s
    lengths (``input_tokens``/``output_tokens``: ``{name: trace}``); its arrival times
    are ignored (the loop decides when each is sent). None: lengths drawn as configured.
    Relative to the scenario file. Without ``num_requests``, every row from
    ``skip_rows`` is sent."""
    format: TraceFormat = "azure"
    """Format of *path* (as a ``trace`` arrival's)."""
    skip_rows: int = Field(default=0, ge=0)
    """Rows of *path* to skip at its start."""


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


CHUNK = 1 << 20
"""Gaps drawn per call (8 MiB of float64): arrival times are produced in chunks of at
most this many, so a run that ``until_s`` or ``duration_s`` ends early never holds
every arrival of ``num_requests`` in memory. Chunking changes no value: the
exponential and gamma samplers draw element by element from the stream, and the
cumulative sum is carried from chunk to chunk as one ``np.cumsum`` adds, one gap after
another (``tests/unit/test_arrivals.py`` checks both against a single draw)."""


def _gap_sums(cfg: _Arrival, rng: np.random.Generator, size: int) -> Iterator[Floats]:
    """Cumulative sums of *size* gaps, in chunks (equal to ``np.cumsum`` of one draw)."""
    carry = 0.0
    done = 0
    while done < size:
        m = min(CHUNK, size - done)
        sums = np.cumsum(np.concatenate(([carry], _gaps(cfg, rng, m))))[1:]
        carry = float(sums[-1])
        done += m
        yield sums


def _time_chunks(
    cfg: PoissonArrivals | GammaArrivals | ConstantArrivals,
    rng: np.random.Generator,
    n: int | None,
    duration_s: float | None,
) -> Iterator[Floats]:
    """Every arrival time, from 0, in chunks — the values one draw of every gap gives:
    with *n*, the n − 1 gaps of one block; without, blocks of 1.2 × the expected
    count in *duration_s* (at least 64), each added to the last time of the one before,
    until that time reaches *duration_s*."""
    if isinstance(cfg, ConstantArrivals):
        count = n if n is not None else int(np.ceil(duration_s * cfg.rate_per_s))  # type: ignore[operator]
        for a in range(0, count, CHUNK):
            yield np.arange(a, min(a + CHUNK, count), dtype=np.float64) / cfg.rate_per_s
        return
    yield np.zeros(1)
    if n is not None:
        yield from _gap_sums(cfg, rng, n - 1)
        return
    assert duration_s is not None
    block = max(64, int(duration_s * cfg.rate_per_s * 1.2))
    last = 0.0
    while last < duration_s:
        for sums in _gap_sums(cfg, rng, block):
            steps = last + sums
            yield steps
        last = float(steps[-1])


def open_loop_times(
    cfg: PoissonArrivals | GammaArrivals | ConstantArrivals,
    rng: np.random.Generator,
    n: int | None,
    duration_s: float | None,
    horizon_s: float | None = None,
    spare: int = 1,
    warp: Warp | None = None,
) -> Floats:
    """Arrival times from 0: *n* of them, or all before *duration_s* (or the fewer).

    With *horizon_s* (the time the run stops), only the times up to it are drawn, and
    *spare* more after it: what a replica (or a router routing ahead) may look at
    before the stop; the times kept are those the whole draw would give. Times never
    decrease, so drawing stops at the first past *duration_s* as well. With *warp* (a
    rate schedule, :mod:`~lyra_simpy.workload.rate`) each chunk of drawn times is
    moved through it before anything is cut (*duration_s* and *horizon_s* are warped
    times).
    """
    scale = 1.0
    if not isinstance(cfg, ConstantArrivals) and cfg.exact_rate and n is not None and n > 1:
        # The rate is the whole draw's: sum every gap first (in chunks, nothing kept),
        # then draw the same stream again from the same state.
        state = rng.bit_generator.state
        last = 0.0
        for chunk in _time_chunks(cfg, rng, n, None):
            last = float(chunk[-1])
        rng.bit_generator.state = state
        if last > 0:
            scale = (n - 1) / np.float64(last) / cfg.rate_per_s
    kept: list[Floats] = []
    beyond = 0
    base_duration = duration_s
    if warp is not None and duration_s is not None:
        base_duration = warp.cumulative(duration_s)
    for chunk in _time_chunks(cfg, rng, n, base_duration):
        times = chunk * scale if scale != 1.0 else chunk
        if warp is not None:
            times = warp.inverse(times)
        if duration_s is not None:
            times = times[times < duration_s]
        if horizon_s is not None:
            past = int(np.count_nonzero(times > horizon_s))
            if beyond + past >= spare:
                kept.append(times[: len(times) - past + spare - beyond])
                break
            beyond += past
        kept.append(times)
        if duration_s is not None and len(times) < len(chunk):
            break
    return np.asarray(np.concatenate(kept) if kept else np.zeros(0), dtype=np.float64)


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
