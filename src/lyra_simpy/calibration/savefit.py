"""llama.cpp's prompt cache in RAM as a fit stores it (``prompt_save`` in the fit file):
what the server's main loop spends per token it copies into the cache when it gives a
request a slot, read from the profile's prompt-cache probe, ``PROFILE.save.csv`` beside
the profile CSV (``lyra-simpy profile`` with ``grid.save_prompt_tokens``, on by default
against llama.cpp). The ``llamacpp`` engine model charges it at every launch
(:mod:`~lyra_simpy.policies.llamacpp_save`).

Each probe row is a lone prompt's client TTFT less the engine's ``prompt_ms`` with *N*
tokens saved at its launch: the request path (constant) plus the copy (growing with
*N*). The slope is fitted by Theil–Sen (the median of the pairwise slopes,
``scipy.stats.theilslopes``): one row that a slow spell of the host moved does not move
it, where a least-squares line would follow it (issue 12: robust statistics).

With ``grid.save_fill_prompts`` the profile fills the server's cache to its limit and
takes the probe again (``PROFILE.save_full.csv``, the same columns): its slope is the
price of a save into memory the cache held before (``reused_ms_per_token``), which the
engine model charges once its cache drops states (docs/VALIDATION-llamacpp.md item 87).
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, NonNegativeFloat

from lyra_simpy.calibration.profiles import Profile, number_columns
from lyra_simpy.metrics.io import atomic_write

Fit = TypeVar("Fit", bound=BaseModel)
"""A fit model with a ``prompt_save`` field
(:class:`~lyra_simpy.calibration.fitmodel.ProfileFit`)."""

SAVE_SUFFIX = ".save.csv"
"""The prompt-cache probe's file beside a profile CSV: one lone prompt a row."""
SAVE_FULL_SUFFIX = ".save_full.csv"
"""The probe taken again on a full cache (``grid.save_fill_prompts``), beside the profile."""
SAVE_COLUMNS = ("saved_tokens", "wait_ms")
"""Its columns: the tokens the server saved at the prompt's launch, and the prompt's
client TTFT less the engine's ``prompt_ms`` (ms)."""


class SaveFit(BaseModel):
    """The prompt cache's save as the probe shows it (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ms_per_token: NonNegativeFloat
    """The main loop's time per token saved (Theil–Sen slope, 0 if it came out below)."""
    intercept_ms: float
    """The wait with nothing saved (the request path as this probe reads it)."""
    prompts: int
    """Lone prompts of the probe it was read from."""
    median_wait_ms: dict[int, float]
    """Each size's median wait (ms): how well a line holds them."""
    reused_ms_per_token: NonNegativeFloat | None = None
    """The same probe taken again once the server's cache was full
    (``PROFILE.save_full.csv``, ``grid.save_fill_prompts``): the time per token saved
    into memory the cache held before (:mod:`~lyra_simpy.policies.llamacpp_save`);
    None: not measured (such saves are charged ``ms_per_token``)."""
    reused_prompts: int = 0
    """Lone prompts of that second probe."""
    reused_median_wait_ms: dict[int, float] = {}
    """Its sizes' median waits (ms)."""


def _probe_file(path: Path, full: bool) -> Path:
    """The probe's file beside the profile CSV at *path* (*full*: on a full cache)."""
    return path.with_suffix(SAVE_FULL_SUFFIX if full else SAVE_SUFFIX)


def write_save(path: Path, rows: list[tuple[int, float]], full: bool = False) -> None:
    """The probe's *rows* (tokens saved, wait in ms) beside the profile CSV at *path*
    (*full*: the probe on a full cache, :data:`SAVE_FULL_SUFFIX`)."""
    lines = [",".join(SAVE_COLUMNS), *(f"{n},{ms:.4f}" for n, ms in rows)]
    atomic_write(_probe_file(path, full), lambda tmp: tmp.write_text("\n".join(lines) + "\n"))


def write_saves(
    path: Path, rows: list[tuple[int, float]], full_rows: list[tuple[int, float]]
) -> None:
    """A profile's prompt-cache probe and its second on a full cache beside the profile
    CSV at *path* (:func:`write_save`); a file of either that this profile did not take
    is removed, so that an earlier profile's at the same path is not read as this one's."""
    for taken, full in ((rows, False), (full_rows, True)):
        if taken:
            write_save(path, taken, full)
        else:
            _probe_file(path, full).unlink(missing_ok=True)


def read_save(path: Path, full: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """The prompt-cache probe beside the profile CSV at *path* (:data:`SAVE_SUFFIX`;
    *full*: :data:`SAVE_FULL_SUFFIX`): each prompt's tokens saved and wait (ms); None
    when the profile has none. A bad cell is a one-line error naming the file, row and
    column."""
    probe = _probe_file(path, full)
    if not probe.is_file():
        return None
    columns = {
        "saved_tokens": (0.0, "a number >= 0"),
        "wait_ms": (None, "a finite number"),
    }
    tokens, ms = number_columns(probe, columns, "the prompt-cache probe's")
    return tokens, ms


def fitted_save(tokens: np.ndarray, ms: np.ndarray) -> SaveFit | None:
    """The save of a probe's rows (module docstring); None with fewer than two sizes."""
    from scipy.stats import theilslopes

    sizes = np.unique(tokens)
    if len(sizes) < 2:
        return None
    slope, intercept, _, _ = theilslopes(ms, tokens)
    medians = {int(n): round(float(np.median(ms[tokens == n])), 3) for n in sizes}
    return SaveFit(
        ms_per_token=round(max(float(slope), 0.0), 6),
        intercept_ms=round(float(intercept), 3),
        prompts=len(ms),
        median_wait_ms=medians,
    )


def with_profile_save(fit: Fit, profile: Profile | None) -> Fit:
    """*fit* with the save of *profile*'s prompt-cache probe where it has one (else
    *fit*), and the reused price of its probe on a full cache where it has that too."""
    if profile is None or (probe := read_save(profile.path)) is None:
        return fit
    got = fitted_save(*probe)
    if got is None:
        return fit
    full = read_save(profile.path, full=True)
    again = fitted_save(*full) if full is not None else None
    if again is not None:
        got = got.model_copy(
            update={
                "reused_ms_per_token": again.ms_per_token,
                "reused_prompts": again.prompts,
                "reused_median_wait_ms": again.median_wait_ms,
            }
        )
    return fit.model_copy(update={"prompt_save": got})
