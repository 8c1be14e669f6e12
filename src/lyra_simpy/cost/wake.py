"""The engine's wake after idle: the first iteration after the engine stood idle for a
while takes longer than the same iteration right after another.

Why: on the validation host (2 vCPUs of a shared VM, ``docs/VALIDATION-llamacpp.md``)
llama-server's lone prompts that came after ≥ 0.3 s of idle took 12–17 ms (about one
decode step) longer than the probes' lone prompts, run back to back, at four of six
points of the matrix (``validation/llamacpp_idle.py``: the server's ``timings.prompt_ms``
by the idle time before the prompt); those after < 0.1 s did not. Idle cores clock
down, a VM's idle vCPUs are descheduled, an engine's worker threads go to sleep (ggml's
threadpool polls, then waits): whichever it is on a host, the engine's compute is slower
to start. It moves light loads' TTFT most: their prompts mostly arrive at an idle
engine.

Model: ``cost.wake: {after_s, ms}`` — the first iteration that starts after the engine
ran nothing for at least ``after_s`` takes ``ms`` longer (the engine stood idle before
the run too, so its first iteration pays it). ``wake: fitted`` (``profile`` cost) takes
them from the fit file's ``wake``, which ``lyra-simpy calibrate`` reads from the
profile's wake probe (``grid.wake_gaps_s``: lone prompts after idle gaps and back to
back, ``PROFILE.wake.csv``; :func:`fitted_wake`). Off by default. The engine
(:class:`~lyra_simpy.engine.replica.Rules`, ``wake_after_s`` / ``wake_s``) charges it;
admission predictions and the summary's unloaded service times do not.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, NonNegativeFloat, PositiveFloat

from lyra_simpy.config import Closed


class WakeConfig(Closed):
    """The first iteration after ``after_s`` of idle takes ``ms`` longer (module
    docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    after_s: PositiveFloat
    """Idle time (s) from which the next iteration pays the wake."""
    ms: NonNegativeFloat
    """What that iteration takes beyond its cost (ms)."""


Wake = WakeConfig | Literal["fitted"]
"""The ``wake`` field of a cost config: a mapping, or ``fitted`` (a ``profile`` cost's fit
file)."""


def fitted_wake(
    gaps_s: npt.NDArray[np.float64], latency_ms: npt.NDArray[np.float64]
) -> tuple[WakeConfig, float, dict[float, float]] | None:
    """The wake from a wake probe's lone prompts: *latency_ms* of each, sent after
    *gaps_s* of idle (0: right after the one before). Each gap's excess is the median of
    its latencies less the back-to-back median; ``after_s`` is the shortest gap whose
    excess reaches half the largest excess, ``ms`` the median latency over the gaps from
    there on less the back-to-back median (0 where no gap is slower). Returns the wake,
    the back-to-back median (ms) and each gap's excess (ms); None without back-to-back
    prompts or without a gap of idle."""
    gaps = np.asarray(gaps_s, dtype=float)
    lat = np.asarray(latency_ms, dtype=float)
    base_rows = lat[gaps == 0]
    idle = sorted(set(gaps[gaps > 0].tolist()))
    if not len(base_rows) or not idle:
        return None
    base = float(np.median(base_rows))
    excess = {g: float(np.median(lat[gaps == g])) - base for g in idle}
    top = max(excess.values())
    if top <= 0:
        return WakeConfig(after_s=idle[-1], ms=0.0), base, excess
    after = next(g for g in idle if excess[g] >= top / 2)
    ms = float(np.median(lat[gaps >= after])) - base
    return WakeConfig(after_s=after, ms=max(ms, 0.0)), base, excess


def refuse_fitted_wake(wake: Wake | None, what: str) -> None:
    """For cost models with no fit file: ``wake: fitted`` has nothing to read."""
    if wake == "fitted":
        raise ValueError(
            f"wake: got 'fitted', but {what} has no fit file to take it from; give "
            "{after_s: s, ms: ms}, or use a profile cost model"
        )


def resolved_wake(config: Any) -> WakeConfig | None:
    """A cost *config*'s ``wake`` (None: no wake), ``fitted`` read from its fit (a
    ``profile`` cost; the config refused ``fitted`` where the fit has none), its
    milliseconds × the config's ``speed`` as the fit's other times are."""
    wake = config.wake
    if wake == "fitted":
        found: WakeConfig | None = config.fit.wake
        if found is None:
            return None
        return WakeConfig(after_s=found.after_s, ms=found.ms * config.speed)
    return wake if isinstance(wake, WakeConfig) else None
