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
server launch serves do). ``session_cv: fitted`` (``profile`` cost model) takes it from
the fit file's ``noise.session``: how far the host's speed moved between stretches of
the profile as long as a load run, read from its speed references
(:func:`~lyra_simpy.cost.hostnoise.fitted_session`; a profile taken with
``grid.speed_reference``). On a shared host whose speed moves a few per cent between
minutes, it is what widens a band to where one load run's steps may fall against the
profile's (the llama.cpp matrix: each load's mean step lay 3 % from its point's level,
``docs/VALIDATION-llamacpp.md`` item 43).

The per-iteration factor can instead be given as ``sigma``: ``step = exp(sigma × z)``,
*z* standard normal, whose *median* is 1 — the spread of a calibrated model's residuals
(:func:`~lyra_simpy.cost.hostnoise.fitted_sigma`), around a model fitted on relative
error that predicts the typical step. ``sigma: fitted`` (``profile`` cost model) takes
it from the fit file (``lyra-simpy calibrate`` stores ``noise.sigma``); the short form
``jitter: fitted`` means ``{sigma: fitted}``. ``cv`` and ``sigma`` exclude each other.
This is what predictions with a band run on (:mod:`lyra_simpy.live.band`: the same
workload under ``session`` 0 … N−1).

**Slow spells** (``spells``): a host that slows down for stretches of steps — a shared
VM's neighbours, a core the engine shares with its API server and clients — makes steps
bimodal and the slow ones come in runs; independent factors with median 1 move neither
the mean step nor a run's mean TPOT. With ``spells: {share, factor, steps}`` each
iteration is in a spell or not, a two-state Markov chain whose spells last ``steps``
iterations on average (geometric) and cover ``share`` of the iterations in the long run;
an iteration in a spell takes ``factor`` times as long (on top of the other factors).
The mean step grows by ``share × (factor − 1)``, and runs differ from one another as
real ones do. ``spells: fitted`` takes them from a fit on replayed runs (``calibrate
--from-runs`` stores ``noise.spells``:
:func:`~lyra_simpy.cost.hostnoise.fitted_spells`); a profile's rows are medians of short
probes and cannot show them. The chain draws from its own stream,
``spells<replica>.<session>``, so the other factors are the same with and without it.

**The host's wander** (``wander``): on a shared host the speed drifts over seconds —
neighbours, clocks, the client and the HTTP threads on the engine's cores — so steps
close in time are slow or quick together (the llama.cpp matrix's decode steps: their
residuals stay correlated for 0.2-3 s, ``docs/VALIDATION-llamacpp.md`` item 31).
Independent factors average out over a request's tens of steps; a drift does not, and it
spreads the requests' TPOT and E2E as the real runs spread them. With ``wander: {sigma,
seconds}`` every iteration also takes the factor exp(*x*), *x* an Ornstein-Uhlenbeck
process in simulated time with stationary σ ``sigma`` and correlation time ``seconds``
(between iterations *dt* apart: x ← x·a + σ·√(1 − a²)·z, a = e^(−dt/τ); the first draw
stationary), so its median factor is 1 and it runs on while the engine idles. ``wander:
fitted`` takes it from a fit on replayed runs (``calibrate --from-runs`` stores
``noise.wander``: :func:`~lyra_simpy.cost.hostnoise.fitted_wander`, from the rebuilt
decode steps' autocovariance over time lags). It draws from
``wander<replica>.<session>``.

Off by default (no ``jitter`` block, or ``cv`` and ``session_cv`` both 0 and no
``sigma``, ``spells`` or ``wander``: the wrapper is not built and nothing is drawn). The draws
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
from collections.abc import Callable
from typing import Annotated, Any, Literal, NamedTuple

import numpy as np
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
from lyra_simpy.cost.hostnoise import SpellsConfig, WanderConfig
from lyra_simpy.errors import LyraError
from lyra_simpy.rng import Streams


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
    session_cv: NonNegativeFloat | Literal["fitted"] = 0.0
    """Coefficient of variation of one factor shared by every iteration of the
    session (every run with this seed and *session*); ``fitted``: the ``profile`` fit
    file's ``noise.session`` (from the profile's speed references)."""
    session: NonNegativeInt = 0
    """Which replay session the run stands for: each draws other noise (stream
    ``jitter<replica>.<session>``). The what-if's A/B/A sets it per run."""
    spells: SpellsConfig | Literal["fitted"] | None = None
    """Slow spells of the host (module docstring); ``fitted``: the ``profile`` fit
    file's ``noise.spells`` (a fit on replayed runs)."""
    wander: WanderConfig | Literal["fitted"] | None = None
    """The host's wander over seconds (module docstring); ``fitted``: the ``profile``
    fit file's ``noise.wander`` (a fit on replayed runs)."""

    @model_validator(mode="after")
    def _one_spread(self) -> JitterConfig:
        if self.sigma is not None and self.cv > 0:
            raise ValueError(f"sigma: got {self.sigma!r} with cv {self.cv}; give one of them")
        return self

    @property
    def active(self) -> bool:
        return (
            self.cv > 0
            or self.session_cv == "fitted"
            or self.session_cv > 0
            or self.sigma is not None
            or self.spells is not None
            or self.wander is not None
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
        wander: tuple[WanderConfig, np.random.Generator] | None = None,
        clock: Callable[[], float] | None = None,
        session_cv: float | None = None,
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
        # *session_cv*: the config's resolved (``fitted``: the fit's)
        cv = config.session_cv if session_cv is None else session_cv
        if isinstance(cv, str):
            raise LyraError("cost.jitter.session_cv: got 'fitted' unresolved (with_jitter)")
        self.session_factor = 1.0
        """The run's shared factor (1 with ``session_cv: 0``)."""
        if cv > 0:
            s_sigma, s_mu = _sigma_mu(cv)
            self.session_factor = float(rng.lognormal(s_mu, s_sigma))
        self._buffer: list[float] = []
        self._next = 0
        self._wander = wander
        """The wander resolved and the stream its drift draws from."""
        self._clock = clock
        """Simulated time now (s); without it, the time the iterations have taken."""
        self._busy_s = 0.0
        self._normals: list[float] = []
        self._drift_at = 0.0
        """When the drift was last drawn (s)."""
        self._drift = 0.0
        """The drift's ln(factor) then; the first draw is stationary."""
        if wander is not None:
            self._drift = wander[0].sigma * self._normal()

    def _normal(self) -> float:
        assert self._wander is not None
        if not self._normals:
            self._normals = self._wander[1].standard_normal(self.BLOCK).tolist()[::-1]
        return self._normals.pop()

    def _drifted(self, times: list[float]) -> list[float]:
        """*times* (consecutive iterations from now, s) times the wander's factor at the
        start of each."""
        if self._wander is None:
            return times
        wander = self._wander[0]
        now = self._clock() if self._clock is not None else self._busy_s
        out = []
        for t in times:
            dt = now - self._drift_at
            if dt > 0:
                a = math.exp(-dt / wander.seconds)
                self._drift = self._drift * a + wander.sigma * math.sqrt(1.0 - a * a) * (
                    self._normal()
                )
                self._drift_at = now
            took = t * math.exp(self._drift)
            out.append(took)
            now += took
        self._busy_s = now
        return out

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
        return self._drifted([self.base.iteration_s(shape)])[0] * self._factors(1)[0]

    def decode_span_s(self, rows: int, context_tokens: int, growth: int, k: int) -> list[float]:
        times = self._drifted(self.base.decode_span_s(rows, context_tokens, growth, k))
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


def with_jitter(
    base: CostModel,
    config: Any,
    streams: Streams,
    replica: int,
    clock: Callable[[], float] | None = None,
) -> CostModel:
    """*base* wrapped in its config's ``jitter`` (itself when there is none or it is
    all zero), drawing from the stream ``jitter<replica>.<session>``; *clock*: the
    simulated time now (s), which the wander runs on (without it, the time the
    iterations have taken)."""
    jitter: JitterConfig | None = config.jitter
    if jitter is None or not jitter.active:
        return base
    sigma = jitter.sigma
    if sigma == "fitted":
        sigma = fit_sigma(config)
    session_cv = fit_session_cv(config) if jitter.session_cv == "fitted" else None
    rng = streams.get(f"jitter{replica}.{jitter.session}")
    # the spells' chain and the wander's drift: each resolved, with its own stream
    chain, drift = (
        _with_stream(config, jitter, field, streams, replica) for field in ("spells", "wander")
    )
    return JitteredCost(base, jitter, rng, sigma, chain, drift, clock, session_cv)


class FittedNoise(NamedTuple):
    """What ``fitted`` reads for one ``jitter`` field, and the words of its refusals."""

    attribute: str
    """The fit file's ``noise.<attribute>`` it takes
    (:class:`~lyra_simpy.calibration.noisefit.NoiseFit`; None there: the fit has none)."""
    words: str
    """What a fit without it lacks (``the fit ... has no <words>``)."""
    remedy: str
    """What to run to get it, when a ``profile`` cost config is validated."""
    at_run: str
    """Why the run refuses it, should a config reach the run unvalidated."""
    instead: str | None = None
    """What to give in its place: the keys of its mapping, or None for a number
    (``<field>: x`` for a ``profile`` cost model, ``a number`` for one with no fit file)."""


# fmt: off
FITTED = {
    "sigma": FittedNoise(attribute="sigma", words="noise",
        remedy="fit it again with lyra-simpy calibrate",
        at_run="the cost model has no fitted noise"),
    "session_cv": FittedNoise(attribute="session", words="session spread",
        remedy="profile with grid.speed_reference and run lyra-simpy calibrate again",
        at_run="the fit has no session spread (profile with grid.speed_reference and run "
        "lyra-simpy calibrate again)"),
    "spells": FittedNoise(attribute="spells", words="slow spells",
        remedy="fit on replayed runs with lyra-simpy calibrate --from-runs",
        at_run="the fit has no slow spells (fit on replayed runs: calibrate --from-runs)",
        instead="share, factor and steps"),
    "wander": FittedNoise(attribute="wander", words="wander",
        remedy="fit on replayed runs with lyra-simpy calibrate --from-runs",
        at_run="the fit has no wander (fit on replayed runs: calibrate --from-runs)",
        instead="sigma and seconds"),
}
# fmt: on
"""The ``jitter`` fields that ``fitted`` takes from a ``profile`` fit file, in the order
they are checked: one table for the validation's refusals (:func:`refuse_fitted_lacking`,
:func:`refuse_fitted_without_fit`) and the run's (:func:`fitted_noise`), so that every
field is refused alike."""


def _asked(jitter: JitterConfig | None) -> list[tuple[str, FittedNoise]]:
    """The fields of :data:`FITTED` that *jitter* sets to ``fitted``, in its order."""
    if jitter is None:
        return []
    return [
        (field, fitted) for field, fitted in FITTED.items() if getattr(jitter, field) == "fitted"
    ]


def fitted_noise(config: Any, field: str) -> Any:
    """What ``jitter.<field>: fitted`` (:data:`FITTED`) of a ``profile`` cost *config*
    takes: its fit's ``noise.<attribute>``; a one-line error without it."""
    fitted = FITTED[field]
    noise = getattr(getattr(config, "fit", None), "noise", None)
    found = getattr(noise, fitted.attribute, None)
    if found is None:  # the configs refuse this when they are validated
        raise LyraError(f"cost.jitter.{field}: got 'fitted', but {fitted.at_run}")
    return found


def _with_stream(config: Any, jitter: JitterConfig, field: str, streams: Streams, replica: int
                 ) -> tuple[Any, np.random.Generator] | None:  # fmt: skip
    """``jitter.<field>`` (``spells`` or ``wander``) resolved, with the stream it draws from
    (``<field><replica>.<session>``); None when it is off."""
    given = getattr(jitter, field)
    if given is None:
        return None
    found = fitted_noise(config, field) if given == "fitted" else given
    return found, streams.get(f"{field}{replica}.{jitter.session}")


def fit_sigma(config: Any) -> float:
    """The fitted noise σ of a ``profile`` cost *config* (``jitter.sigma: fitted``)."""
    return float(fitted_noise(config, "sigma"))


def fit_session_cv(config: Any) -> float:
    """The fitted session CV of a ``profile`` cost *config* (``jitter.session_cv:
    fitted``): the fit's ``noise.session``."""
    return float(fitted_noise(config, "session_cv").cv)


def refuse_fitted_lacking(jitter: JitterConfig | None, noise: Any, path: str) -> None:
    """For a ``profile`` cost config whose fit file *path* holds *noise* (its ``noise``,
    maybe None): a field set to ``fitted`` that the fit lacks is refused, saying what to
    run to get it or what to give instead."""
    for field, fitted in _asked(jitter):
        if getattr(noise, fitted.attribute, None) is None:
            instead = fitted.instead or f"{field}: x"
            raise ValueError(
                f"jitter.{field}: got 'fitted', but the fit {path!r} has no {fitted.words} "
                f"({fitted.remedy}, or give {instead})"
            )


def refuse_fitted_without_fit(jitter: JitterConfig | None, what: str) -> None:
    """For cost models with no fit file: ``fitted`` has nothing to read."""
    for field, fitted in _asked(jitter):
        raise ValueError(
            f"jitter.{field}: got 'fitted', but {what} has no fit file to take it from; "
            f"give {fitted.instead or 'a number'}, or use a profile cost model"
        )


def expected(cost: CostModel) -> CostModel:
    """The model without noise (predictions, unloaded service times)."""
    return cost.base if isinstance(cost, JitteredCost) else cost
