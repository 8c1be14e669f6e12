"""The handle a process gets on the running cluster: what it may read and change.

A process is a plain SimPy process — a generator function ``(env, cluster, config)``
that yields events — registered in :data:`~lyra_simpy.processes.PROCESSES`. It sleeps
with :meth:`Cluster.wait` (or any SimPy event) and acts through the :class:`Cluster`
below: take a replica down and bring it back, start or drain one, change the arrival
rate, read what a router reads. It never touches the engine's objects.

:meth:`Cluster.wait` wakes the process after the replicas committed the iterations
ending at its instant and before the arrivals of that instant are routed
(:data:`~lyra_simpy.engine.timing.PROCESS_PRIORITY`), so what it reads and does at *t*
is what a stepped engine shows at *t*, and a fused run of many decode iterations is
cut exactly where stepping would be (identical results: the property tests check it).
A plain ``env.timeout`` works too, but may wake before an iteration ending at the same
instant is committed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from lyra_simpy.cluster.dispatch import replica_loads
from lyra_simpy.cluster.lifecycle import Fleet, State
from lyra_simpy.cluster.routing import ReplicaLoad
from lyra_simpy.engine.timing import PROCESS_PRIORITY, PhaseEvent, delay_at_least
from lyra_simpy.errors import SimulationError
from lyra_simpy.rng import Streams
from lyra_simpy.workload.source import OpenLoopSource, Source


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One replica as a process sees it, now."""

    replica: int
    state: State
    """``serving``, ``starting``, ``draining``, ``down`` or ``off``
    (:mod:`lyra_simpy.cluster.lifecycle`)."""
    queued: int
    """Requests routed to it and not running yet (queued, waiting, deferred)."""
    running: int
    """Requests holding KV on it (prefilling or decoding)."""
    kv_used_blocks: int
    kv_blocks: int


class Cluster:
    """The running cluster, for one process (*name*: the process's key in the
    scenario; its random streams are named after it)."""

    def __init__(
        self, env: simpy.Environment, fleet: Fleet, source: Source, streams: Streams, name: str
    ) -> None:
        self._env = env
        self._fleet = fleet
        self._source = source
        self._streams = streams
        self.name = name
        self.rng = streams.get(f"process_{name}")
        """The process's own random stream (STYLE §6: nothing else draws from it)."""

    # -- time -----------------------------------------------------------------------
    @property
    def now_s(self) -> float:
        return float(self._env.now)

    def wait(self, delay_s: float) -> simpy.Event:
        """An event *delay_s* from now, processed after the replicas committed what
        ends then and before that instant's arrivals are routed (yield it)."""
        if not delay_s >= 0:
            raise SimulationError(f"{self.name}: wait({delay_s!r}): must be >= 0 s")
        now = self.now_s
        return PhaseEvent(self._env, delay_at_least(now, now + delay_s), PROCESS_PRIORITY)

    def wait_until(self, time_s: float) -> simpy.Event:
        """As :meth:`wait`, at *time_s* (now if it has passed)."""
        return self.wait(max(time_s - self.now_s, 0.0))

    def stream(self, key: str) -> np.random.Generator:
        """A random stream of the process's own, one per *key* (e.g. one per replica,
        so that replica *i* draws the same numbers whatever the number of replicas)."""
        return self._streams.get(f"process_{self.name}_{key}")

    # -- what a router reads ----------------------------------------------------------
    @property
    def size(self) -> int:
        """Replica slots, whatever their state (indices 0 … size − 1)."""
        return len(self._fleet.replicas)

    def loads(self) -> list[ReplicaLoad]:
        """Every replica's :class:`~lyra_simpy.cluster.routing.ReplicaLoad`, exactly as a
        router reads it now."""
        return replica_loads(self._fleet.replicas)

    def replicas(self) -> list[ReplicaStatus]:
        """Every replica's state and load now."""
        fleet = self._fleet
        out = []
        for i, (r, load) in enumerate(zip(fleet.replicas, self.loads(), strict=True)):
            queued = len(fleet.sources[i].queue) + len(r.waiting) + len(r.deferred)
            state: State = r.state  # type: ignore[assignment]
            used = load.num_blocks - load.free_blocks
            out.append(
                ReplicaStatus(i, state, queued, load.outstanding - queued, used, load.num_blocks)
            )
        return out

    def waiting_for_replica(self) -> int:
        """Requests held at the router because no replica serves."""
        return len(self._fleet.dispatcher.held)

    # -- what a process does ----------------------------------------------------------
    def take_down(self, replica: int) -> bool:
        """Replica *replica* fails now: the iteration in flight is lost, its requests are
        routed again or fail (``cluster.failover``), its KV and prefix cache are lost.
        False (nothing happens) if it is off or already down."""
        return self._fleet.fail(self._index(replica))

    def bring_up(self, replica: int) -> bool:
        """Replica *replica*, down, serves again now (cold). False if it was not down."""
        return self._fleet.repair(self._index(replica))

    def add_replica(self, startup_s: float = 0.0) -> int | None:
        """Start the first replica slot that is off; it serves *startup_s* later (a
        cold start). Returns its index, or None when no slot is off (the slots: the
        largest ``max_replicas`` of the scenario's processes)."""
        for i, r in enumerate(self._fleet.replicas):
            if r.state == "off":
                self._fleet.start(i, startup_s)
                return i
        return None

    def drain(self, replica: int) -> bool:
        """Replica *replica* takes no new request and goes off once it has run what it
        holds (nothing is lost); one starting stops at once. False if it was neither
        serving nor starting."""
        return self._fleet.drain(self._index(replica))

    def scale_arrivals(self, factor: float) -> None:
        """From now on, requests arrive at *factor* × the workload's own rate (replacing
        its ``rate_schedule`` from now; open-loop workloads only)."""
        if not factor > 0:
            raise SimulationError(f"{self.name}: scale_arrivals({factor!r}): must be > 0")
        if not isinstance(self._source, OpenLoopSource):
            raise SimulationError(
                f"{self.name}: scale_arrivals needs an open-loop workload (a closed loop "
                "has no arrival rate)"
            )
        self._source.scale_from(self.now_s, factor)
        self._fleet.dispatcher.arrivals_changed()

    def _index(self, replica: int) -> int:
        if not 0 <= replica < self.size:
            raise SimulationError(
                f"{self.name}: replica {replica!r}: must be in 0 … {self.size - 1}"
            )
        return replica
