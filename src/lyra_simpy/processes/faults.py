"""Replica failures: each replica fails and is repaired, at random or on a schedule.

``exponential`` (``mtbf_s`` and ``mttr_s``): replica slot *i* alternates up periods
drawn from an exponential distribution of mean ``mtbf_s`` (mean time between failures)
and repairs of mean ``mttr_s`` (mean time to repair) — the alternating renewal process
of classic reliability models, whose long-run availability is MTBF / (MTBF + MTTR)
(Barlow & Proschan, *Mathematical Theory of Reliability*, 1965). Each slot draws from
a stream of its own (``process_<name>_replica<i>``), so replica *i* fails at the same
times whatever the number of replicas (common random numbers across a sweep). A
failure that comes while the slot is off (not provisioned by an autoscaler) or down
does nothing; the cycle goes on.

``schedule``: each window takes one replica down at ``at_s`` for ``for_s`` seconds (a
planned failure, a what-if, a test with a hand-computed answer).

A failure stops the replica at once (:mod:`lyra_simpy.cluster.lifecycle`): what it held
is routed again or fails by ``cluster.failover``, and it comes back cold.
"""

from __future__ import annotations

from typing import Literal

import simpy
from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    model_validator,
)

from lyra_simpy.config import Closed
from lyra_simpy.engine.timing import Process
from lyra_simpy.processes.handle import Cluster


class Outage(Closed):
    """Replica *replica* is down from *at_s* for *for_s* seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replica: NonNegativeInt
    at_s: NonNegativeFloat
    for_s: PositiveFloat


class FaultsConfig(Closed):
    """Failures and repairs of every replica: exponential (``mtbf_s``, ``mttr_s``) or a
    fixed ``schedule`` of outages (one of the two)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["faults"] = "faults"
    mtbf_s: PositiveFloat | None = None
    """Mean time between failures of one replica (exponential up periods)."""
    mttr_s: PositiveFloat | None = None
    """Mean time to repair (exponential down periods): the replica serves again after
    it, with an empty KV pool and a cold prefix cache."""
    schedule: list[Outage] = Field(default_factory=list)
    """Fixed outages instead (one replica's must not overlap)."""

    @model_validator(mode="after")
    def _one_kind(self) -> FaultsConfig:
        random = self.mtbf_s is not None or self.mttr_s is not None
        if random and self.schedule:
            raise ValueError("schedule: got outages with mtbf_s/mttr_s, must use one of the two")
        if random and (self.mtbf_s is None or self.mttr_s is None):
            missing = "mttr_s" if self.mttr_s is None else "mtbf_s"
            raise ValueError(f"{missing}: got None, must be set with the other (seconds > 0)")
        if not random and not self.schedule:
            raise ValueError("mtbf_s: got None, set mtbf_s and mttr_s, or a schedule of outages")
        ends: dict[int, float] = {}
        for i, o in sorted(enumerate(self.schedule), key=lambda p: (p[1].replica, p[1].at_s)):
            if o.at_s < ends.get(o.replica, -1.0):
                raise ValueError(
                    f"schedule[{i}].at_s: got {o.at_s}, must be >= {ends[o.replica]} (replica "
                    f"{o.replica} is down until then)"
                )
            ends[o.replica] = o.at_s + o.for_s
        return self


def fail_and_repair(env: simpy.Environment, cluster: Cluster, config: FaultsConfig) -> Process:
    """Fail and repair the replicas as *config* says (one SimPy process per replica or
    outage; this one waits on them)."""
    if config.schedule:
        runs = [env.process(_outage(cluster, o)) for o in config.schedule]
    else:
        assert config.mtbf_s is not None
        assert config.mttr_s is not None
        runs = [
            env.process(_renewal(cluster, i, config.mtbf_s, config.mttr_s))
            for i in range(cluster.size)
        ]
    yield env.all_of(runs)


def _outage(cluster: Cluster, outage: Outage) -> Process:
    yield cluster.wait_until(outage.at_s)
    if cluster.take_down(outage.replica):
        yield cluster.wait_until(outage.at_s + outage.for_s)
        cluster.bring_up(outage.replica)


def _renewal(cluster: Cluster, i: int, mtbf_s: float, mttr_s: float) -> Process:
    rng = cluster.stream(f"replica{i}")
    while True:
        up_s, repair_s = rng.exponential(mtbf_s), rng.exponential(mttr_s)
        yield cluster.wait(up_s)
        failed = cluster.take_down(i)
        yield cluster.wait(repair_s)
        if failed:
            cluster.bring_up(i)
