"""The step-time noise a fit stores (``noise`` in the fit file, for ``cost.jitter:
fitted``): the residuals' robust σ, the host's slow spells and wander where replayed
runs or the profile's wander probe show them, and its speed between a profile's minutes
where the profile has speed references (:mod:`lyra_simpy.cost.hostnoise` reads
each; :mod:`lyra_simpy.cost.jitter` draws them)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, NonNegativeFloat

from lyra_simpy.config import Closed
from lyra_simpy.cost.hostnoise import SpellsConfig, WanderConfig, fitted_sigma

Floats = npt.NDArray[np.float64]


class SpellsFit(SpellsConfig):
    """Slow spells of the host seen in replayed runs (``share``, ``factor``, ``steps`` as
    :func:`lyra_simpy.cost.hostnoise.fitted_spells` finds them), for ``cost.jitter.spells:
    fitted``."""

    decode_steps: int
    """Rebuilt decode-only steps they were taken from."""


class WanderFit(WanderConfig):
    """The host's wander seen in replayed runs or in a profile's wander probe (``sigma``,
    ``seconds`` as :func:`lyra_simpy.cost.hostnoise.fitted_wander` finds them), for
    ``cost.jitter.wander: fitted``."""

    pairs: int
    """Pairs of decode steps its autocovariance was read from."""
    source: Literal["runs", "profile"] = "runs"
    """Where the steps came from: rebuilt from replayed runs, or the profile's wander
    probe (``PROFILE.wander.csv``; a fit on runs and a profile takes the runs')."""


class SessionFit(Closed):
    """The host's speed between stretches of a profile as long as a load run (``cv`` as
    :func:`lyra_simpy.cost.hostnoise.fitted_session` finds it from the profile's speed
    references, ``PROFILE.speed.csv``), for ``cost.jitter.session_cv: fitted``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cv: NonNegativeFloat
    """Coefficient of variation of a whole run's factor."""
    references: int
    """Speed references it was read from (one a probe)."""
    stretches: int
    """Consecutive stretches they were cut into."""


class NoiseFit(Closed):
    """The spread of the fit's residuals, for ``cost.jitter: fitted``
    (:mod:`lyra_simpy.cost.jitter`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sigma: float
    """1.4826 × the median absolute deviation of ln(measured / fitted) over the rows."""
    rows: int
    """Rows (profile rows and rebuilt steps) it was taken over."""
    spells: SpellsFit | None = None
    """Slow spells (a fit on replayed runs only; None otherwise or when no step was in
    one)."""
    wander: WanderFit | None = None
    """The host's wander over seconds (from replayed runs, else the profile's wander
    probe; None without either or when their steps show none)."""
    session: SessionFit | None = None
    """The host's speed between minutes (from the profile's speed references; None
    without them)."""


def noise_fit(measured_ms: Floats, predicted_ms: Floats) -> NoiseFit | None:
    """:class:`NoiseFit` of the rows (None where a prediction is 0: no ratio)."""
    if not len(measured_ms) or not (predicted_ms > 0).all():
        return None
    return NoiseFit(sigma=fitted_sigma(measured_ms, predicted_ms), rows=len(measured_ms))
