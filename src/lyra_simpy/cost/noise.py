"""Step-time noise: a spread around the cost model's step times, for predictions with a band.

A real engine's step of one shape does not always take the same time (a shared host,
clocks, caches; VALIDATION-NOTES "Noise floor"). With ``cost.noise`` on, every engine
step of a replica takes the cost model's time × a log-normal factor ``exp(σ z)``, *z*
standard normal, drawn from the stream ``step_noise<draw>_<replica>``. The factor's
*median* is 1: the fitted model predicts the typical step (its loss is on relative error,
so its residuals are centred on 0 in the median), and the noise spreads steps around it.

YAML (``profile`` cost model): ``noise: fitted`` takes σ from the fit file (``noise.sigma``:
:func:`fitted_sigma` over the profile's or the runs' residuals); ``noise: {sigma: 0.05}``
states it. ``draw`` picks one of many independent noise sequences with the workload
unchanged: :mod:`lyra_simpy.live.band` runs draws 0..N−1 to get an interval per metric.
Off by default (no ``noise``): runs are then exactly as without this module.

With noise a decode span is no longer the same k numbers however it is split, so a
replica with noise steps every iteration as its own event (no fused spans): slower, same
semantics. Admission policies that predict step times see the model without noise.

Note: a step-time ``jitter`` knob is being added separately (``cost.jitter``); this is
the same idea with a fitted σ, and the two are meant to merge into one.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BeforeValidator, ConfigDict, Field, NonNegativeInt, PositiveFloat

from lyra_simpy.config import Closed
from lyra_simpy.cost.base import BatchShape, CostModel

MAD_TO_SIGMA = 1.4826
"""Median absolute deviation × this = σ of a normal distribution (1 / Φ⁻¹(3/4)): the
robust spread estimate, so a few slowed rows do not widen the band as they widen a
standard deviation."""


def _short_form(value: Any) -> Any:
    return {"sigma": "fitted"} if value == "fitted" else value


class StepNoiseConfig(Closed):
    """``noise: fitted`` or ``noise: {sigma: 0.05, draw: 0}`` (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sigma: PositiveFloat | Literal["fitted"]
    """σ of ln(step time / model time); ``fitted``: the fit file's ``noise.sigma``."""
    draw: NonNegativeInt = 0
    """Which noise sequence (the workload, drawn from ``seed``, stays the same)."""


StepNoise = Annotated[StepNoiseConfig, BeforeValidator(_short_form), Field()]


def fitted_sigma(
    measured_ms: npt.NDArray[np.float64], predicted_ms: npt.NDArray[np.float64]
) -> float:
    """σ of ln(measured / predicted), robustly: :data:`MAD_TO_SIGMA` × its median absolute
    deviation. It is the spread of the fit's residuals, so it holds the model's misfit
    as well as the steps' own noise: an upper bound on the noise where the model is
    systematically off for some shapes."""
    r = np.log(measured_ms / predicted_ms)
    return float(MAD_TO_SIGMA * np.median(np.abs(r - np.median(r))))


class NoisyCost:
    """*inner*'s step times × ``exp(sigma × z)``, *z* drawn from *rng* once per step."""

    def __init__(self, inner: CostModel, sigma: float, rng: np.random.Generator) -> None:
        self.inner = inner
        self.sigma = sigma
        self.rng = rng

    def iteration_s(self, shape: BatchShape) -> float:
        return self.inner.iteration_s(shape) * math.exp(self.sigma * self.rng.standard_normal())

    def decode_span_s(self, rows: int, context_tokens: int, growth: int, k: int) -> list[float]:
        base = self.inner.decode_span_s(rows, context_tokens, growth, k)
        factors = np.exp(self.sigma * self.rng.standard_normal(k)).tolist()
        return [b * f for b, f in zip(base, factors, strict=True)]
