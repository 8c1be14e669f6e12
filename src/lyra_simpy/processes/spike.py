"""A load spike: arrivals at a multiple of the workload's rate for a while.

The example of ``docs/extending.md``: a complete process in a few lines — a config
class, and a generator that sleeps with ``cluster.wait`` and acts through the handle.
"""

from __future__ import annotations

from typing import Literal

import simpy
from pydantic import ConfigDict, NonNegativeFloat, PositiveFloat

from lyra_simpy.config import Closed
from lyra_simpy.engine.timing import Process
from lyra_simpy.processes.handle import Cluster


class LoadSpikeConfig(Closed):
    """From *at_s*, for *for_s* seconds, requests arrive *factor* times as fast."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["load_spike"] = "load_spike"
    at_s: NonNegativeFloat
    for_s: PositiveFloat
    factor: PositiveFloat


def load_spike(env: simpy.Environment, cluster: Cluster, config: LoadSpikeConfig) -> Process:
    """The spike; afterwards the workload's own rate (its ``rate_schedule`` no more)."""
    yield cluster.wait_until(config.at_s)
    cluster.scale_arrivals(config.factor)
    yield cluster.wait(config.for_s)
    cluster.scale_arrivals(1.0)
