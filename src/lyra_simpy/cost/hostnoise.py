"""What a host does to step times beyond a step's own noise, and how each is read from
measured / fitted step times: the robust σ of the residuals (:func:`fitted_sigma`), slow
spells (:class:`SpellsConfig`, :func:`fitted_spells`), the wander over seconds
(:class:`WanderConfig`, :func:`fitted_wander`) and the speed between minutes
(:func:`fitted_session`). :mod:`lyra_simpy.cost.jitter` draws them
(its module docstring says how); ``lyra-simpy calibrate`` fits them."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, Field, PositiveFloat

from lyra_simpy.config import Closed

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


WANDER_LAGS_S = (0.05, 20.0)
"""Time lags (s) :func:`fitted_wander` reads the steps' autocovariance over: from a few
steps apart (below it the step rebuild's own timing, one step's tokens reaching the
client up to ~10 ms apart, correlates neighbours) to the longest a run of the matrix
holds many pairs at (its runs last 10-60 s)."""

WANDER_BINS = 12
"""Log-spaced lag bins between the ends of :data:`WANDER_LAGS_S`."""


class WanderConfig(Closed):
    """The host's wander (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sigma: PositiveFloat
    """Stationary σ of ln(factor) (median factor 1)."""
    seconds: PositiveFloat
    """Correlation time τ of the drift: factors *dt* apart correlate e^(−dt/τ)."""


def fitted_wander(
    runs: list[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]],
) -> tuple[WanderConfig, int] | None:
    """The host's wander from measured / fitted step times, each run's (end times in s,
    ratios) in order, and the pairs of steps it was read from. ln(ratio) less its median
    over every run (steps in a slow spell, :data:`SPELL_THRESHOLD` × the median ratio or
    more, left out: the spells model them); the products of pairs of steps of one run
    :data:`WANDER_LAGS_S` apart, averaged in :data:`WANDER_BINS` log-spaced bins of their
    lag, fitted by σ² e^(−lag/τ) (each bin one point: a bin's pairs are far from
    independent, and weighting by them would let the long lags, with most pairs and
    least signal, set τ): an Ornstein-Uhlenbeck drift under
    independent per-step noise (which adds to the lag-0 variance only). None without two
    bins of pairs or without a positive, finite fit."""
    from scipy.optimize import curve_fit

    kept = [(t, r) for t, r in runs if len(r) > 1]
    if not kept:
        return None
    typical = float(np.median(np.concatenate([r for _, r in kept])))
    series = []
    for t, r in kept:
        ok = r < SPELL_THRESHOLD * typical
        series.append((t[ok], np.log(r[ok] / typical)))
    mean = float(np.mean(np.concatenate([x for _, x in series])))
    lo, hi = WANDER_LAGS_S
    edges = np.geomspace(lo, hi, WANDER_BINS + 1)
    sums = np.zeros(WANDER_BINS)
    lag_sums = np.zeros(WANDER_BINS)
    counts = np.zeros(WANDER_BINS)
    for t, x in series:
        x = x - mean
        for k in range(1, len(x)):
            dt = t[k:] - t[:-k]
            if not len(dt) or dt.min() > hi:
                break
            at = np.searchsorted(edges, dt, side="right") - 1
            use = (at >= 0) & (at < WANDER_BINS)
            np.add.at(sums, at[use], x[k:][use] * x[:-k][use])
            np.add.at(lag_sums, at[use], dt[use])
            np.add.at(counts, at[use], 1)
    full = counts > 0
    if full.sum() < 2:
        return None
    lags, cov = lag_sums[full] / counts[full], sums[full] / counts[full]

    def decay(lag: npt.NDArray[np.float64], var: float, tau: float) -> npt.NDArray[np.float64]:
        return var * np.exp(-lag / tau)

    start = (max(float(cov[0]), 1e-6), float(np.median(lags)))
    try:
        (var, tau), _ = curve_fit(decay, lags, cov, p0=start, bounds=([0.0, 1e-3], [1.0, 1e4]))
    except (RuntimeError, ValueError):
        return None
    if not (var > 0 and np.isfinite(var) and np.isfinite(tau)):
        return None
    return WanderConfig(sigma=math.sqrt(var), seconds=float(tau)), int(counts.sum())


SESSION_STRETCHES = 6
"""Consecutive stretches :func:`fitted_session` cuts a profile's speed references into.
A profile of the llama.cpp matrix (``docs/VALIDATION-llamacpp.md``) takes 54-96
references over its grid's few minutes, so a stretch holds 9-16 of them and lasts tens of
seconds: about one of its load runs (10-110 s), whose steps share the host's level of
those seconds. (The references are not timed; the stretches are cut by count.)"""


def fitted_session(references_ms: npt.NDArray[np.float64]) -> tuple[float, int] | None:
    """How far the host's speed moves between stretches of a profile as long as a load
    run, as ``cost.jitter.session_cv`` (the coefficient of variation of one factor a whole
    run shares), and the stretches it was read from. *references_ms*: the profile's speed
    references in the order taken (a lone decode timed before every probe,
    ``grid.speed_reference``). ln(reference) cut into :data:`SESSION_STRETCHES`
    consecutive stretches; the variance of the stretches' medians, less what the
    references' own scatter within a stretch adds to a median of *k* of them (π/2 × s²/k,
    *s* their robust σ about their stretch's median), is σ² of ln(factor); the CV is
    √(e^σ² − 1). 0 where the stretches differ no more than that scatter makes them; None
    with fewer than two references a stretch. Three things it does not see, stated: a
    drift slower than the profile (a load run 30 minutes later may find the host further
    off); the steps of a full batch, which on the AMD host slowed and quickened a little
    apart from the lone step (``docs/VALIDATION-llamacpp.md`` item 43); and where a
    run's own mean step lies against the profile's median step (a run's slow steps)."""
    x = np.log(np.asarray(references_ms, dtype=np.float64))
    if len(x) < 2 * SESSION_STRETCHES:
        return None
    stretches = np.array_split(x, SESSION_STRETCHES)
    medians = np.array([np.median(s) for s in stretches])
    within = np.concatenate([s - m for s, m in zip(stretches, medians, strict=True)])
    scatter = MAD_TO_SIGMA * float(np.median(np.abs(within)))
    per_median = math.pi / 2 * scatter**2 * float(np.mean([1.0 / len(s) for s in stretches]))
    var = max(0.0, float(np.var(medians, ddof=1)) - per_median)
    return math.sqrt(math.expm1(var)), SESSION_STRETCHES
