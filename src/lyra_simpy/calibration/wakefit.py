"""The engine's wake after idle as a fit stores it (``wake`` in the fit file, for
``cost.wake: fitted``): read from the profile's wake probe, ``PROFILE.wake.csv`` beside
the profile CSV (``lyra-simpy profile`` with ``grid.wake_gaps_s``), by
:func:`~lyra_simpy.cost.wake.fitted_wake`."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TypeVar

import numpy as np
from pydantic import BaseModel

from lyra_simpy.cost.wake import WakeConfig, fitted_wake
from lyra_simpy.errors import TraceError

Fit = TypeVar("Fit", bound=BaseModel)
"""A fit model with a ``wake`` field (:class:`~lyra_simpy.calibration.fit.ProfileFit`)."""

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


def read_wake(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """The wake probe beside the profile CSV at *path* (:data:`WAKE_SUFFIX`): each prompt's
    gap (s) and time (ms); None when the profile has none. A bad cell is a one-line
    error naming the file, row and column."""
    probe = path.with_suffix(WAKE_SUFFIX)
    if not probe.is_file():
        return None
    gaps: list[float] = []
    ms: list[float] = []
    with probe.open(newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in WAKE_COLUMNS if c not in header]
        if missing:
            raise TraceError(f"{probe}: header: missing column {missing[0]} (the wake probe's)")
        at = [header.index(c) for c in WAKE_COLUMNS]
        for line, row in enumerate(reader, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            values = []
            for col, i in zip(WAKE_COLUMNS, at, strict=True):
                cell = row[i].strip() if i < len(row) else ""
                try:
                    value = float(cell)
                except ValueError:
                    value = math.nan
                if not (math.isfinite(value) and value >= 0):
                    raise TraceError(
                        f"{probe}: row {line}: {col}: got {cell!r}, must be a number >= 0"
                    )
                values.append(value)
            gaps.append(values[0])
            ms.append(values[1])
    return np.asarray(gaps, dtype=np.float64), np.asarray(ms, dtype=np.float64)


def with_profile_wake(fit: Fit, profile_path: Path | None) -> Fit:
    """*fit* with the wake of the profile's wake probe where it has one (else *fit*)."""
    if profile_path is None:
        return fit
    probe = read_wake(profile_path)
    if probe is None:
        return fit
    gaps, ms = probe
    got = fitted_wake(gaps, ms)
    if got is None:
        return fit
    base = float(np.median(ms[gaps == 0]))
    wake = WakeFit(**got.model_dump(), prompts=len(ms), back_to_back_ms=round(base, 3))
    return fit.model_copy(update={"wake": wake})
