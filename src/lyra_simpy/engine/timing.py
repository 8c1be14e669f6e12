"""Time in the engine: landing exactly on a float, and ordering what happens at one instant.

Fused runs must land on exactly the times the unfused engine reaches by adding
durations one by one (:func:`exact_delay`). A cluster orders each instant in four
phases — replicas commit the iterations ending then, the processes of
:mod:`lyra_simpy.processes` act (``Cluster.wait``), the dispatcher routes the arrivals
due, replicas plan — with :class:`PhaseEvent` priorities (SimPy processes ``URGENT`` = 0,
then ``NORMAL`` = 1 events; ours come after).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Generator
from typing import Any

import simpy

from lyra_simpy.errors import SimulationError

Process = Generator[simpy.Event, Any, Any]
"""A SimPy process body (what ``env.process`` takes)."""

PROCESS_PRIORITY = simpy.events.EventPriority(2)
"""A process (failures, an autoscaler) acts after every replica committed the iterations
ending at its instant (SimPy processes ``NORMAL`` = 1 events first), so it reads and
changes what a stepped engine shows then..."""
ROUTE_PRIORITY = simpy.events.EventPriority(3)
"""... a cluster routes the arrivals of the instant after that ..."""
PLAN_PRIORITY = simpy.events.EventPriority(4)
"""... and its replicas plan their next iterations after that."""


class PhaseEvent(simpy.events.Event):
    """A timeout processed after the events of lower *priority* at its instant (SimPy's
    ``Timeout`` with a priority of ours): it orders what a cluster does at one instant
    (commit, route, plan) whatever order the replicas' events were scheduled in."""

    def __init__(
        self, env: simpy.Environment, delay: float, priority: simpy.events.EventPriority
    ) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, priority, delay)


def exact_delay(now: float, target: float) -> float | None:
    """A delay *d* with ``now + d == target`` in floating point (None if no float does
    it: a rounding tie can skip *target*). Fused runs land on exactly the times the
    unfused engine reaches by adding durations one by one."""
    d = target - now
    for _ in range(4):
        reached = now + d
        if reached == target:
            return d
        d = math.nextafter(d, math.inf if reached < target else -math.inf)
    return None


def finite_time(now: float, target: float) -> float:
    """*target*, checked: a NaN or infinite time would never be reached — SimPy would
    schedule it and the run would spin or stall forever — so it is an error here,
    where it first meets the clock (inputs are refused earlier; this is the backstop)."""
    if not math.isfinite(target):
        raise SimulationError(f"time {target!r} at t = {now!r} s is not finite (engine bug)")
    return target


def delay_until(now: float, target: float) -> float:
    """Delay to sleep until *target* (idle waits: the nearest float is fine there)."""
    d = exact_delay(now, finite_time(now, target))
    return target - now if d is None else d


def delay_at_least(now: float, target: float) -> float:
    """A delay landing exactly on *target* if a float does, else just past it (a
    cluster routes an arrival no earlier than its time)."""
    d = exact_delay(now, finite_time(now, target))
    if d is not None:
        return d
    d = max(target - now, 0.0)
    while now + d < target:
        d = math.nextafter(d, math.inf)
    return d


def timeout_at(env: simpy.Environment, when: float) -> simpy.Event:
    """A timeout triggered exactly at *when* (not before now). From a time other than
    where it was planned, a fused run cut short may have no float delay landing on its
    end (a rounding tie, only while the clock reads less than half of it): the event
    then goes into SimPy's queue at that time directly."""
    d = exact_delay(env.now, when)
    if d is not None:
        return env.timeout(d)
    if when < env.now:
        raise SimulationError(f"time {when!r} is before now ({env.now!r}; engine bug)")
    event = simpy.Event(env)
    event._ok = True
    event._value = None
    heapq.heappush(env._queue, (when, simpy.events.NORMAL, next(env._eid), event))
    return event
