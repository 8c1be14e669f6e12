"""Token-length distributions for prompts and outputs.

Every sampler returns integers ≥ 1: continuous draws are rounded to the nearest
integer (``numpy.rint``) and clipped to ``[min, max]`` — clipping is a stated choice of
the scenario, not a hidden cap. ``empirical`` resamples a trace's rows with
replacement; when the input and the output both name the same trace file, they use the
*same* rows, so the joint distribution of (input, output) is the trace's. ``trace``
takes the lengths of the rows a ``trace`` arrival process replays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from lyra_simpy.config import Closed
from lyra_simpy.workload.catalog import resolve_path
from lyra_simpy.workload.traces import Trace, TraceFormat, read_trace

Ints = npt.NDArray[np.int64]


class _Dist(Closed):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Clipped(_Dist):
    min: PositiveInt = 1
    """Smallest length kept (draws below are raised to it)."""
    max: PositiveInt | None = None
    """Largest length kept (draws above are cut to it); None: no upper clip."""

    @model_validator(mode="after")
    def _ordered(self) -> _Clipped:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self

    def clip(self, x: npt.NDArray[np.float64]) -> Ints:
        hi = np.inf if self.max is None else self.max
        return np.clip(np.rint(x), self.min, hi).astype(np.int64)


class FixedLength(_Dist):
    name: Literal["fixed"] = "fixed"
    tokens: PositiveInt


class UniformLength(_Dist):
    """Integers uniform on ``[low, high]`` (both included)."""

    name: Literal["uniform"] = "uniform"
    low: PositiveInt
    high: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class NormalLength(_Clipped):
    name: Literal["normal"] = "normal"
    mean: PositiveFloat
    std: NonNegativeFloat


class LogNormalLength(_Clipped):
    """Log-normal with the given *mean* (of the unclipped distribution) and *sigma* (of
    the underlying normal): ``mu = ln(mean) - sigma²/2``."""

    name: Literal["lognormal"] = "lognormal"
    mean: PositiveFloat
    sigma: PositiveFloat


class EmpiricalLength(_Dist):
    """Resample the *field* column of a trace file (rows drawn with replacement)."""

    name: Literal["empirical"] = "empirical"
    path: str
    format: TraceFormat = "azure"
    field: Literal["input", "output"]


class TraceLength(_Dist):
    """The lengths of the rows replayed by a ``trace`` arrival process."""

    name: Literal["trace"] = "trace"


class MixtureComponent(_Dist):
    weight: PositiveFloat
    dist: LengthConfig


class MixtureLength(_Dist):
    """Each draw picks a component with probability proportional to its *weight*."""

    name: Literal["mixture"] = "mixture"
    components: Annotated[list[MixtureComponent], Field(min_length=1)]


LengthConfig = Annotated[
    FixedLength
    | UniformLength
    | NormalLength
    | LogNormalLength
    | EmpiricalLength
    | TraceLength
    | MixtureLength,
    Field(discriminator="name"),
]
# MixtureComponent names LengthConfig before it exists: its validator, built when first
# used (config.Closed: ``defer_build``), finds it in this module then.


@dataclass
class LengthContext:
    """What samplers need besides their config: the stream, paths, shared trace rows."""

    rng: np.random.Generator
    base_dir: Path
    rows: Callable[[str, TraceFormat, int], tuple[Trace, Ints]]
    """(path, format, n) → the trace and n row indices, the same for every caller."""
    trace_lengths: Callable[[str], Ints] | None = None
    """field → lengths of the replayed trace rows (only with a ``trace`` arrival)."""
    field: Literal["input", "output"] = "input"


def sample_lengths(cfg: object, ctx: LengthContext, n: int) -> Ints:
    """Draw *n* lengths from the distribution *cfg*."""
    rng = ctx.rng
    if isinstance(cfg, FixedLength):
        return np.full(n, cfg.tokens, dtype=np.int64)
    if isinstance(cfg, UniformLength):
        return rng.integers(cfg.low, cfg.high, size=n, endpoint=True, dtype=np.int64)
    if isinstance(cfg, NormalLength):
        return cfg.clip(rng.normal(cfg.mean, cfg.std, size=n))
    if isinstance(cfg, LogNormalLength):
        mu = math.log(cfg.mean) - cfg.sigma**2 / 2
        return cfg.clip(rng.lognormal(mu, cfg.sigma, size=n))
    if isinstance(cfg, EmpiricalLength):
        trace, idx = ctx.rows(cfg.path, cfg.format, n)
        column = trace.input_tokens if cfg.field == "input" else trace.output_tokens
        return column[idx].astype(np.int64)
    if isinstance(cfg, TraceLength):
        if ctx.trace_lengths is None:
            raise ValueError("length 'trace' needs a 'trace' arrival process")
        return ctx.trace_lengths(ctx.field)[:n].astype(np.int64)
    if isinstance(cfg, MixtureLength):
        weights = np.array([c.weight for c in cfg.components])
        pick = rng.choice(len(weights), size=n, p=weights / weights.sum())
        out = np.empty(n, dtype=np.int64)
        for k, comp in enumerate(cfg.components):
            mask = pick == k
            out[mask] = sample_lengths(comp.dist, ctx, int(mask.sum()))
        return out
    raise TypeError(f"unknown length distribution {cfg!r}")


def resolve(path: str, base_dir: Path) -> Path:
    """A trace path, relative to the scenario file unless absolute, or a known trace's
    name (:mod:`~lyra_simpy.workload.catalog`)."""
    return resolve_path(path, base_dir)


def read(path: str, fmt: TraceFormat, base_dir: Path) -> Trace:
    return read_trace(resolve(path, base_dir), fmt)
