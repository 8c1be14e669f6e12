"""Processes that act on the cluster while it runs: failures, an autoscaler, load spikes.

A process is a plain SimPy process: a generator function ``(env, cluster, config)``
that sleeps (``yield cluster.wait(seconds)``) and acts through a typed handle on the
cluster (:class:`Cluster`: take a replica down and bring it back, start or drain one,
change the arrival rate, read what a router reads). ``PROCESSES`` maps the YAML
``name`` to the function; its config is a pydantic model in the :data:`ProcessConfig`
union (a test checks that the two agree). A scenario switches processes on by key::

    processes:
      faults: {mtbf_s: 10800, mttr_s: 300}
      autoscaler: {max_replicas: 8, signal: queue, target: 4, startup_s: 90}

The key is the process's label (its random streams are named after it) and its
``name`` unless the entry gives one (two entries may run the same process with
different settings). With any process on, the scenario runs as a cluster (one replica:
a cluster of one) in which replicas may be down, starting, draining or off
(:mod:`lyra_simpy.cluster.lifecycle`); the workload is drawn to its end even with
``until_s`` (a process may change the rate), and the summary's ``availability``,
``replica_hours``, ``retried`` and ``goodput_lost_to_failures`` describe what the
processes did. Without processes nothing of this runs: no event, no check per
iteration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

import simpy
from pydantic import Field

from lyra_simpy.engine.timing import Process
from lyra_simpy.processes.autoscaler import AutoscalerConfig, autoscale
from lyra_simpy.processes.faults import FaultsConfig, Outage, fail_and_repair
from lyra_simpy.processes.handle import Cluster, ReplicaStatus
from lyra_simpy.processes.spike import LoadSpikeConfig, load_spike

ProcessFunction = Callable[[simpy.Environment, Cluster, Any], Process]

PROCESSES: dict[str, ProcessFunction] = {
    "faults": fail_and_repair,
    "autoscaler": autoscale,
    "load_spike": load_spike,
}

ProcessConfig = Annotated[
    FaultsConfig | AutoscalerConfig | LoadSpikeConfig, Field(discriminator="name")
]


def replica_slots(processes: Mapping[str, Any], initial: int) -> int:
    """Replica slots of the cluster: *initial*, or more when a process's config asks
    for them with a ``max_replicas`` field (the autoscaler's)."""
    return max([initial, *(getattr(cfg, "max_replicas", 0) for cfg in processes.values())])


def check(processes: Mapping[str, Any], initial: int, groups: bool, disaggregated: bool) -> None:
    """The processes fit the cluster (*initial* replicas serving at the start; *groups*:
    heterogeneous replica groups): a ``ValueError`` naming the field otherwise."""
    for key, cfg in processes.items():
        where = f"processes.{key}"
        if disaggregated:
            raise ValueError(
                f"{where}: got {cfg.name!r} with cluster.disaggregation, must be used with a "
                "colocated cluster (disaggregated pools take no processes yet)"
            )
        if isinstance(cfg, AutoscalerConfig):
            if groups:
                raise ValueError(
                    f"{where}: got an autoscaler with cluster.groups, must be used with "
                    "cluster.replicas (it starts copies of one replica)"
                )
            if not cfg.min_replicas <= initial <= cfg.max_replicas:
                raise ValueError(
                    f"cluster.replicas: got {initial} with {where}, must be in "
                    f"[min_replicas, max_replicas] = [{cfg.min_replicas}, {cfg.max_replicas}]"
                )
        if isinstance(cfg, FaultsConfig):
            slots = replica_slots(processes, initial)
            for i, outage in enumerate(cfg.schedule):
                if outage.replica >= slots:
                    raise ValueError(
                        f"{where}.schedule[{i}].replica: got {outage.replica}, must be < "
                        f"the cluster's {slots} replicas"
                    )


__all__ = [
    "PROCESSES",
    "AutoscalerConfig",
    "Cluster",
    "FaultsConfig",
    "LoadSpikeConfig",
    "Outage",
    "Process",
    "ProcessConfig",
    "ProcessFunction",
    "ReplicaStatus",
    "check",
    "replica_slots",
]
