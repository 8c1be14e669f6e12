"""Step-time noise: a seeded, multiplicative jitter on every iteration's cost.

Real engines do not repeat a step in the same time twice (clocks, kernel scheduling,
the host), and a benchmark that compares two launches measured in separate sessions
sees that noise (issue 16: the SGLang benchmark is scored A/B/A for that reason). A
cost model is exact; ``cost.jitter`` (any cost model: it wraps the model, see
:func:`with_jitter`) multiplies the time of each iteration by a factor

``f = session × step``, ``step ~ LogNormal`` with mean 1 and coefficient of variation
``cv`` (one draw per iteration), ``session ~ LogNormal`` with mean 1 and CV
``session_cv`` (what moves a whole session, e.g. clocks: the first draw of the stream,
so every run of one scenario seed and ``session`` shares it, as the workloads one
server launch serves do).

Off by default (no ``jitter`` block, or ``cv`` and ``session_cv`` both 0: the
wrapper is not built and nothing is drawn). The draws come from the run's stream
``jitter<replica>.<session>`` (:mod:`lyra_simpy.rng`): ``session`` picks another
sequence of draws for the same scenario and seed, which is how the what-if runs its
baseline, candidate and second baseline on distinct noise (:mod:`lyra_simpy.whatif`)
while every workload stays the same request for request.

Scope, stated: the speculative draft steps' fixed time (``speculative.draft_step_ms``)
is added by the engine outside the cost model and is not jittered; admission
predictions and the unloaded service times of the summary use the model without
noise (:func:`expected`). A jittered model draws one factor per call, so it breaks the
cost protocol's rule that a span's element *j* equals the single step (the rule fused
decode runs rely on): iterations are never fused when jitter is on (the simulation
turns fusion off, as it does for speculative decoding).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import ConfigDict, NonNegativeFloat, NonNegativeInt

from lyra_simpy.config import Closed
from lyra_simpy.cost.base import BatchShape, CostModel
from lyra_simpy.rng import Streams


class JitterConfig(Closed):
    """Seeded step-time noise (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cv: NonNegativeFloat = 0.0
    """Coefficient of variation of each iteration's time (independent per iteration)."""
    session_cv: NonNegativeFloat = 0.0
    """Coefficient of variation of one factor shared by every iteration of the
    session (every run with this seed and *session*)."""
    session: NonNegativeInt = 0
    """Which replay session the run stands for: each draws other noise (stream
    ``jitter<replica>.<session>``). The what-if's A/B/A sets it per run."""

    @property
    def active(self) -> bool:
        return self.cv > 0 or self.session_cv > 0


def _sigma_mu(cv: float) -> tuple[float, float]:
    """LogNormal parameters with mean 1 and coefficient of variation *cv*."""
    sigma2 = math.log1p(cv * cv)
    return math.sqrt(sigma2), -sigma2 / 2.0


class JitteredCost:
    """*base*'s iteration times, each multiplied by a factor drawn from *rng*."""

    BLOCK = 1024
    """Draws are taken this many at a time (NumPy gives the same sequence in blocks as
    one by one); the factors are used in order, one per iteration."""

    def __init__(self, base: CostModel, config: JitterConfig, rng: np.random.Generator) -> None:
        self.base = base
        self.config = config
        self._rng = rng
        self._sigma, self._mu = _sigma_mu(config.cv)
        self.session_factor = 1.0
        """The run's shared factor (1 with ``session_cv: 0``)."""
        if config.session_cv > 0:
            s_sigma, s_mu = _sigma_mu(config.session_cv)
            self.session_factor = float(rng.lognormal(s_mu, s_sigma))
        self._buffer: list[float] = []
        self._next = 0

    def _factors(self, k: int) -> list[float]:
        if not self._sigma:
            return [self.session_factor] * k
        out: list[float] = []
        while len(out) < k:
            if self._next == len(self._buffer):
                draws = self._rng.lognormal(self._mu, self._sigma, self.BLOCK)
                self._buffer = (draws * self.session_factor).tolist()
                self._next = 0
            take = min(k - len(out), len(self._buffer) - self._next)
            out.extend(self._buffer[self._next : self._next + take])
            self._next += take
        return out

    def iteration_s(self, shape: BatchShape) -> float:
        return self.base.iteration_s(shape) * self._factors(1)[0]

    def decode_span_s(self, rows: int, context_tokens: int, growth: int, k: int) -> list[float]:
        times = self.base.decode_span_s(rows, context_tokens, growth, k)
        return [t * f for t, f in zip(times, self._factors(k), strict=True)]

    def describe(self) -> dict[str, object]:
        describe = getattr(self.base, "describe", None)
        out: dict[str, object] = dict(describe()) if callable(describe) else {}
        out["jitter"] = self.config.model_dump()
        return out


def with_jitter(base: CostModel, config: Any, streams: Streams, replica: int) -> CostModel:
    """*base* wrapped in its config's ``jitter`` (itself when there is none or it is
    all zero), drawing from the stream ``jitter<replica>.<session>``."""
    jitter: JitterConfig | None = getattr(config, "jitter", None)
    if jitter is None or not jitter.active:
        return base
    return JitteredCost(base, jitter, streams.get(f"jitter{replica}.{jitter.session}"))


def expected(cost: CostModel) -> CostModel:
    """The model without noise (predictions, unloaded service times)."""
    return cost.base if isinstance(cost, JitteredCost) else cost
