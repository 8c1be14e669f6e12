"""The engine's wake after idle as a fit stores it (``wake`` in the fit file, for
``cost.wake: fitted``): read from the profile's wake probe, ``PROFILE.wake.csv`` beside
the profile CSV (``lyra-simpy profile`` with ``grid.wake_gaps_s``), by
:func:`~lyra_simpy.cost.wake.fitted_wake`."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import numpy as np
from pydantic import BaseModel, Field

from lyra_simpy.calibration.profiles import Profile, number_columns
from lyra_simpy.cost.wake import WakeConfig, fitted_wake

Fit = TypeVar("Fit", bound=BaseModel)
"""A fit model with a ``wake`` field (:class:`~lyra_simpy.calibration.fitmodel.ProfileFit`)."""

WAKE_SUFFIX = ".wake.csv"
"""The wake probe's file beside a profile CSV: one lone prompt a row."""
WAKE_COLUMNS = ("gap_s", "latency_ms")
"""Its columns: the idle time before the prompt (0: right after the one before) and its
time (the engine's own where it says, else the client's TTFT)."""


class WakeFit(WakeConfig):
    """The wake seen by a profile's wake probe (``after_s``, ``ms`` as
    :func:`~lyra_simpy.cost.wake.fitted_wake` finds them), for ``cost.wake: fitted``."""

    prompts: int
    """Lone prompts of the probe it was read from."""
    back_to_back_ms: float
    """Their median time back to back (gap 0), what the excess is taken over."""
    excess_ms: dict[float, float] = Field(default_factory=dict)
    """Each gap's median time less the back-to-back median (ms; empty in fits made
    before it was kept): how the wake grows with the idle time, which ``ms`` steps."""


def read_wake(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """The wake probe beside the profile CSV at *path* (:data:`WAKE_SUFFIX`): each prompt's
    gap (s) and time (ms); None when the profile has none. A bad cell is a one-line
    error naming the file, row and column."""
    probe = path.with_suffix(WAKE_SUFFIX)
    if not probe.is_file():
        return None
    allowed = (0.0, "a number >= 0")
    gaps, ms = number_columns(probe, dict.fromkeys(WAKE_COLUMNS, allowed), "the wake probe's")
    return gaps, ms


def with_profile_wake(fit: Fit, profile: Profile | None) -> Fit:
    """*fit* with the wake of *profile*'s wake probe where it has one (else *fit*)."""
    probe = read_wake(profile.path) if profile is not None else None
    got = fitted_wake(*probe) if probe is not None else None
    if probe is None or got is None:
        return fit
    config, base, excess = got
    wake = WakeFit(
        **config.model_dump(), prompts=len(probe[1]), back_to_back_ms=round(base, 3),
        excess_ms={g: round(e, 3) for g, e in excess.items()},
    )  # fmt: skip
    return fit.model_copy(update={"wake": wake})
