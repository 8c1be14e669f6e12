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

The per-iteration factor can instead be given as ``sigma``: ``step = exp(sigma × z)``,
*z* standard normal, whose *median* is 1 — the spread of a calibrated model's residuals
(:func:`fitted_sigma`), around a model fitted on relative error that predicts the
typical step. ``sigma: fitted`` (``profile`` cost model) takes it from the fit file
(``lyra-simpy calibrate`` stores ``noise.sigma``); the short form ``jitter: fitted``
means ``{sigma: fitted}``. ``cv`` and ``sigma`` exclude each other. This is what
predictions with a band run on (:mod:`lyra_simpy.live.band`: the same workload under
``session`` 0 … N−1).

**Slow spells** (``spells``): a host that slows down for stretches of steps — a shared
VM's neighbours, a core the engine shares with its API server and clients — makes
steps bimodal and the slow ones come in runs; independent factors with median 1 move
neither the mean step nor a run's mean TPOT. With ``spells: {share, factor, steps}``
each iteration is in a spell or not, a two-state Markov chain whose spells last
``steps`` iterations on average (geometric) and cover ``share`` of the iterations in
the long run; an iteration in a spell takes ``factor`` times as long (on top of the
other factors). The mean step grows by ``share × (factor − 1)``, and runs differ from
one another as real ones do. ``spells: fitted`` takes them from a fit on replayed runs
(``calibrate --from-runs`` stores ``noise.spells``: :func:`fitted_spells`); a profile's
rows are medians of short probes and cannot show them. The chain draws from its own
stream, ``spells<replica>.<session>``, so the other factors are the same with and
without it.

Off by default (no ``jitter`` block, or ``cv`` and ``session_cv`` both 0 and no
``sigma`` or ``spells``: the wrapper is not built and nothing is drawn). The draws
come from the run's stream ``jitter<replica>.<session>`` (:mod:`lyra_simpy.rng`):
``session`` picks another sequence of draws for the same scenario and seed, which is
how the what-if runs its baseline, candidate and second baseline on distinct noise
(:mod:`lyra_simpy.whatif`) while every workload stays the same request for request.

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
import sys
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    model_validator,
)

from lyra_simpy.config import Closed
from lyra_simpy.cost.base import BatchShape, CostModel
from lyra_simpy.errors import LyraError
from lyra_simpy.rng import Streams

MAD_TO_SIGMA = 1.4826
"""Median absolute deviation × this = σ of a normal distribution (1 / Φ⁻¹(3/4)): the
robust spread estimate, so a few slowed rows do not widen the band as they widen a
standard deviation."""


def fitted_sigma(
    measured_ms: npt.NDArray[np.float64], predicted_ms: npt.NDArray[np.float64]
) -> float:
    """σ of ln(measured / predicted), robustly: :data:`MAD_TO_SIGMA` × its median absolute
    deviation. It is the spread of the fit's residuals, so it holds the model's misfit
    as well as the steps' own noise: an upper bound on the noise where the model is
    systematically off for some shapes."""
    r = np.log(measured_ms / predicted_ms)
    return float(MAD_TO_SIGMA * np.median(np.abs(r - np.median(r))))


SPELL_THRESHOLD = 1.5
"""A rebuilt step at this many times its typical ratio to the fit or more is in a slow
spell (:func:`fitted_spells`): between the modes the vLLM matrix's real runs show, the
steps at the fit (0.9-1.2x) and those of the spells (1.6-1.9x;
``validation/vllm_steps.py``)."""


class SpellsConfig(Closed):
    """Slow spells of the host (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    share: float = Field(ge=0.0, lt=1.0)
    """Share of the iterations in a spell, in the long run."""
    factor: float = Field(ge=1.0)
    """How many times as long an iteration in a spell takes."""
    steps: float = Field(ge=1.0)
    """Iterations a spell lasts on average (geometric)."""

    @property
    def mean_factor(self) -> float:
        """The mean step's growth: 1 + share × (factor − 1)."""
        return 1.0 + self.share * (self.factor - 1.0)


def fitted_spells(ratios: list[npt.NDArray[np.float64]]) -> SpellsConfig | None:
    """Slow spells from measured / fitted step times, each array one run's steps in
    order: a step at :data:`SPELL_THRESHOLD` × the median ratio or more is in a spell;
    ``share`` is their share, ``factor`` the median ratio of those over the median of
    the others, ``steps`` the mean length of their runs. None without a step in a spell
    (or without steps)."""
    steps = [r for r in ratios if len(r)]
    if not steps:
        return None
    typical = float(np.median(np.concatenate(steps)))
    slow = [r >= SPELL_THRESHOLD * typical for r in steps]
    n_slow = sum(int(s.sum()) for s in slow)
    if n_slow == 0:
        return None
    every = np.concatenate(steps)
    flags = np.concatenate(slow)
    # a spell starts at a slow step whose predecessor (in the same run) is not slow
    starts = sum(int(s[0]) + int(np.sum(s[1:] & ~s[:-1])) for s in slow)
    return SpellsConfig(
        share=n_slow / len(every),
        factor=max(1.0, float(np.median(every[flags]) / np.median(every[~flags])))
        if (~flags).any()
        else SPELL_THRESHOLD,
        steps=n_slow / starts,
    )


def _short_form(value: Any) -> Any:
    return {"sigma": "fitted"} if value == "fitted" else value


class JitterConfig(Closed):
    """Seeded step-time noise (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cv: NonNegativeFloat = 0.0
    """Coefficient of variation of each iteration's time (independent per iteration;
    mean factor 1)."""
    sigma: PositiveFloat | Literal["fitted"] | None = None
    """Instead of ``cv``: σ of ln(factor), median factor 1; ``fitted``: the ``profile``
    fit file's ``noise.sigma``."""
    session_cv: NonNegativeFloat = 0.0
    """Coefficient of variation of one factor shared by every iteration of the
    session (every run with this seed and *session*)."""
    session: NonNegativeInt = 0
    """Which replay session the run stands for: each draws other noise (stream
    ``jitter<replica>.<session>``). The what-if's A/B/A sets it per run."""
    spells: SpellsConfig | Literal["fitted"] | None = None
    """Slow spells of the host (module docstring); ``fitted``: the ``profile`` fit
    file's ``noise.spells`` (a fit on replayed runs)."""

    @model_validator(mode="after")
    def _one_spread(self) -> JitterConfig:
        if self.sigma is not None and self.cv > 0:
            raise ValueError(f"sigma: got {self.sigma!r} with cv {self.cv}; give one of them")
        return self

    @property
    def active(self) -> bool:
        return (
            self.cv > 0 or self.session_cv > 0 or self.sigma is not None or self.spells is not None
        )


Jitter = Annotated[JitterConfig, BeforeValidator(_short_form), Field()]
"""The ``jitter`` field of every cost config (``fitted`` or a mapping)."""


def _sigma_mu(cv: float) -> tuple[float, float]:
    """LogNormal parameters with mean 1 and coefficient of variation *cv*."""
    sigma2 = math.log1p(cv * cv)
    return math.sqrt(sigma2), -sigma2 / 2.0


class JitteredCost:
    """*base*'s iteration times, each multiplied by a factor drawn from *rng*."""

    BLOCK = 1024
    """Draws are taken this many at a time (NumPy gives the same sequence in blocks as
    one by one); the factors are used in order, one per iteration."""

    def __init__(
        self,
        base: CostModel,
        config: JitterConfig,
        rng: np.random.Generator,
        sigma: float | None = None,
        spells: tuple[SpellsConfig, np.random.Generator] | None = None,
    ) -> None:
        self.base = base
        self.config = config
        self._rng = rng
        self._spells = spells
        """The spells resolved and the stream their chain draws from."""
        self._slow = False
        self._left = 0
        """Iterations left in the chain's current state (0: the other state next)."""
        if spells is not None:  # the first state: in a spell with probability share
            self._slow = bool(spells[1].random() < spells[0].share)
            self._left = _run_length(spells[0], self._slow, spells[1])
        # *sigma* (median-1 factors, the config's sigma resolved) or the cv's (mean 1)
        self._sigma, self._mu = (sigma, 0.0) if sigma is not None else _sigma_mu(config.cv)
        self.session_factor = 1.0
        """The run's shared factor (1 with ``session_cv: 0``)."""
        if config.session_cv > 0:
            s_sigma, s_mu = _sigma_mu(config.session_cv)
            self.session_factor = float(rng.lognormal(s_mu, s_sigma))
        self._buffer: list[float] = []
        self._next = 0

    def _factors(self, k: int) -> list[float]:
        out = self._noise(k)
        if self._spells is None:
            return out
        spells, rng = self._spells
        j = 0
        while j < k:  # the chain's next k states, a run of one state at a time
            if self._left == 0:
                self._slow = not self._slow
                self._left = _run_length(spells, self._slow, rng)
            take = min(self._left, k - j)
            if self._slow:
                out[j : j + take] = [f * spells.factor for f in out[j : j + take]]
            self._left -= take
            j += take
        return out

    def _noise(self, k: int) -> list[float]:
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


def _run_length(spells: SpellsConfig, slow: bool, rng: np.random.Generator) -> int:
    """Iterations the chain stays in its state: geometric, with mean ``steps`` in a
    spell and ``steps × (1 − share) / share`` between spells (so that spells cover
    ``share`` in the long run; exact while that mean is at least 1, i.e. share at most
    steps / (steps + 1))."""
    if slow:
        return int(rng.geometric(min(1.0, 1.0 / spells.steps)))
    if spells.share == 0.0:
        return sys.maxsize  # never in a spell
    return int(rng.geometric(min(1.0, spells.share / (spells.steps * (1.0 - spells.share)))))


def with_jitter(base: CostModel, config: Any, streams: Streams, replica: int) -> CostModel:
    """*base* wrapped in its config's ``jitter`` (itself when there is none or it is
    all zero), drawing from the stream ``jitter<replica>.<session>``."""
    jitter: JitterConfig | None = config.jitter
    if jitter is None or not jitter.active:
        return base
    sigma = jitter.sigma
    if sigma == "fitted":
        sigma = fit_sigma(config)
    rng = streams.get(f"jitter{replica}.{jitter.session}")
    spells = jitter.spells
    if spells == "fitted":
        spells = fit_spells(config)
    chain = None
    if spells is not None:
        chain = (spells, streams.get(f"spells{replica}.{jitter.session}"))
    return JitteredCost(base, jitter, rng, sigma, chain)


def fit_spells(config: Any) -> SpellsConfig:
    """The fitted slow spells of a ``profile`` cost *config* (``jitter.spells: fitted``)."""
    noise = getattr(getattr(config, "fit", None), "noise", None)
    spells = getattr(noise, "spells", None)
    if not isinstance(spells, SpellsConfig):  # the configs refuse this when validated
        raise LyraError(
            "cost.jitter.spells: got 'fitted', but the fit has no slow spells (fit on "
            "replayed runs: calibrate --from-runs)"
        )
    return spells  # a SpellsFit: the config and how many steps it was taken from


def fit_sigma(config: Any) -> float:
    """The fitted noise σ of a ``profile`` cost *config* (``jitter.sigma: fitted``)."""
    fit = getattr(config, "fit", None)
    noise = getattr(fit, "noise", None)
    if noise is None:  # the configs refuse this when they are validated
        raise LyraError("cost.jitter.sigma: got 'fitted', but the cost model has no fitted noise")
    return float(noise.sigma)


def refuse_fitted_without_fit(jitter: JitterConfig | None, what: str) -> None:
    """For cost models with no fit file: ``sigma: fitted`` has nothing to read."""
    if jitter is not None and jitter.sigma == "fitted":
        raise ValueError(
            f"jitter.sigma: got 'fitted', but {what} has no fit file to take it from; "
            "give a number, or use a profile cost model"
        )
    if jitter is not None and jitter.spells == "fitted":
        raise ValueError(
            f"jitter.spells: got 'fitted', but {what} has no fit file to take them from; "
            "give share, factor and steps, or use a profile cost model"
        )


def expected(cost: CostModel) -> CostModel:
    """The model without noise (predictions, unloaded service times)."""
    return cost.base if isinstance(cost, JitteredCost) else cost
