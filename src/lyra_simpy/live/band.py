"""Predictions with a band: one scenario simulated under N draws of its step-time noise.

The real runs a simulation is compared with replay one workload again and again; what
differs between them is how long the engine's steps take. So the band keeps the
scenario's workload (its ``seed``) and varies only the step-time noise
(``cost.jitter.session`` = 0 … N−1, :mod:`lyra_simpy.cost.jitter`): each metric's band is
the range [min, max] of its N simulated values. N draws cover a further draw's value
with probability (N − 1) / (N + 1) (order statistics): 9 draws, 80 %; 19 draws, 90 %.

``lyra-simpy compare SIM_DIR REAL_DIR... --band SCENARIO --seeds N`` adds the band to the
comparison and says, per metric, whether the real (median) value lies inside it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lyra_simpy.errors import LyraError
from lyra_simpy.scenario import Scenario


def band(scenario: Scenario, draws: int, metrics: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Per metric: ``low``, ``high`` (min and max over *draws* noise draws),
    ``median`` and every draw's ``values``. The scenario's cost must have ``jitter``."""
    from lyra_simpy.simulation import simulate

    if draws < 2:
        raise LyraError(f"--seeds: got {draws}, must be >= 2 (a band needs two draws)")
    jitter = getattr(scenario.cost, "jitter", None)
    if jitter is None or not jitter.active:
        raise LyraError(
            f"{scenario.name}: cost.jitter is off; a band needs it "
            "(cost: {name: profile, ..., jitter: fitted} or jitter: {sigma: 0.05})"
        )
    given = jitter.model_dump(mode="json")
    summaries = [
        simulate(scenario.with_values({"cost.jitter": {**given, "session": k}})).summary
        for k in range(draws)
    ]
    out: dict[str, dict[str, Any]] = {}
    for name in metrics:
        values = [s.get(name) for s in summaries]
        known = [float(v) for v in values if v is not None]
        out[name] = {
            "low": min(known) if known else None,
            "high": max(known) if known else None,
            "median": float(np.median(known)) if known else None,
            "values": values,
        }
    return out


def inside(value: float, interval: dict[str, Any]) -> bool | None:
    """Whether *value* lies in the band (None when the band has no values)."""
    low, high = interval["low"], interval["high"]
    if low is None or high is None:
        return None
    return bool(low <= value <= high)
