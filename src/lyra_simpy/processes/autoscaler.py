"""An autoscaler: replicas started and drained to hold a load signal near a target.

Every ``interval_s`` it reads one signal summed over the serving replicas — ``queue``
(requests routed and not running yet, plus those held at the router for want of a
replica), ``running`` (requests holding KV), ``concurrency`` (both: the requests in
flight, Knative's default autoscaling metric) or ``kv`` (the fraction of each replica's
KV blocks in use) — and computes Kubernetes' Horizontal Pod Autoscaler rule:
``desired = ceil(load / target)``, clamped to [``min_replicas``, ``max_replicas``], and
no change while ``load / (target × serving)`` is within ``tolerance`` of 1
(kubernetes.io, "Horizontal Pod Autoscaling", algorithm details; the defaults of
``interval_s``, ``cooldown_s`` and ``tolerance`` are HPA's: a 15 s sync period, a 300 s
scale-down stabilization window, 0.1).

The signals differ in what they can see. ``queue`` measures only the work beyond what
the replicas hold: once a backlog is cleared it reads 0 and asks for ``min_replicas``
even at a load that needs more, so it oscillates under a sustained burst. ``running``
saturates at the replicas' batch width: it never asks for more than about
``serving × max_batch / target``, so a large burst is met one step at a time.
``concurrency`` counts both: the backlog while there is one, the running work after.

Scaling up starts replicas at once (the slots that are off, lowest index first); each
serves ``startup_s`` later — the cold start of loading weights and warming up (the
replicas starting count as provisioned, so it does not start them twice). Scaling
down follows HPA's stabilization window: it goes only to the highest count recommended
over the last ``cooldown_s`` (the count at the start counts as a recommendation at 0),
so a dip of the signal does not drain replicas the next evaluation wants back. It
stops replicas still starting first, then drains the serving replicas with the least
work (ties: the highest index): a draining replica takes no new request and runs what
it holds to the end, so nothing is lost.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

import simpy
from pydantic import ConfigDict, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from lyra_simpy.config import Closed
from lyra_simpy.engine.timing import Process
from lyra_simpy.processes.handle import Cluster, ReplicaStatus


class AutoscalerConfig(Closed):
    """Scale the replicas between *min_replicas* and *max_replicas* on one signal."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["autoscaler"] = "autoscaler"
    min_replicas: PositiveInt = 1
    max_replicas: PositiveInt
    """Also the replica slots the cluster has (``cluster.replicas`` serve at the start)."""
    signal: Literal["queue", "running", "concurrency", "kv"] = "concurrency"
    target: PositiveFloat
    """The signal per serving replica to hold: requests (``queue``, ``running``,
    ``concurrency``) or a fraction of the KV pool (``kv``, at most 1)."""
    interval_s: PositiveFloat = 15.0
    """Time between evaluations (HPA's sync period)."""
    cooldown_s: NonNegativeFloat = 300.0
    """Scale-down stabilization window: a scale-down goes to the highest count
    recommended within this long (HPA's default 300 s); scale-ups are not held back."""
    startup_s: NonNegativeFloat = 0.0
    """Cold start: a replica serves this long after it is started."""
    tolerance: NonNegativeFloat = 0.1
    """No change while the signal is within this fraction of the target (HPA's)."""

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalerConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas: got {self.min_replicas}, must be <= max_replicas "
                f"({self.max_replicas})"
            )
        if self.signal == "kv" and self.target > 1:
            raise ValueError(
                f"target: got {self.target} with signal kv, must be a fraction of the KV "
                "pool in (0, 1]"
            )
        return self


def desired_replicas(config: AutoscalerConfig, status: list[ReplicaStatus], held: int) -> int:
    """How many replicas the rule wants now (see the module docstring)."""
    serving = [s for s in status if s.state == "serving"]
    if config.signal == "queue":
        load = float(sum(s.queued for s in serving) + held)
    elif config.signal == "running":
        load = float(sum(s.running for s in serving))
    elif config.signal == "concurrency":
        load = float(sum(s.queued + s.running for s in serving) + held)
    else:
        load = sum(s.kv_used_blocks / s.kv_blocks for s in serving)
    n = len(serving)
    if n and abs(load / (config.target * n) - 1.0) <= config.tolerance:
        desired = n
    else:
        desired = math.ceil(load / config.target)
    return min(max(desired, config.min_replicas), config.max_replicas)


def autoscale(env: simpy.Environment, cluster: Cluster, config: AutoscalerConfig) -> Process:
    """Evaluate every ``interval_s`` and start or drain replicas."""
    first = cluster.replicas()
    history = deque([(cluster.now_s, sum(s.state in ("serving", "starting") for s in first))])
    """Recommendations within the stabilization window: (time, count)."""
    while True:
        yield cluster.wait(config.interval_s)
        now = cluster.now_s
        status = cluster.replicas()
        desired = desired_replicas(config, status, cluster.waiting_for_replica())
        history.append((now, desired))
        while history[0][0] < now - config.cooldown_s:
            history.popleft()
        starting = [s.replica for s in status if s.state == "starting"]
        serving = [s for s in status if s.state == "serving"]
        provisioned = len(starting) + len(serving)
        if desired > provisioned:
            for _ in range(desired - provisioned):
                cluster.add_replica(config.startup_s)
            continue
        stable = max(count for _, count in history)
        if stable < provisioned:
            idle_first = sorted(serving, key=lambda s: (s.queued + s.running, -s.replica))
            for i in [*reversed(starting), *(s.replica for s in idle_first)][
                : provisioned - stable
            ]:
                cluster.drain(i)
