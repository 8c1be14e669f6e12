"""Replicas that come and go: failures, repairs, cold starts and drains.

A replica of a cluster with processes (:mod:`lyra_simpy.processes`) is in one state at a
time (``Replica.state``):

* ``serving``: routed to, runs its requests;
* ``starting``: provisioned but not serving yet (a cold start, ``startup_s``): it is paid
  for and routed nothing;
* ``draining``: routed nothing, runs what it holds to the end, then ``off`` — nothing
  is lost;
* ``down``: failed. A failure stops the replica at once (:meth:`Replica.stop
  <lyra_simpy.engine.replica.Replica.stop>`): the iteration in flight is lost, and each
  request it held (running, queued, deferred, routed and not yet taken) is routed again
  or ends ``failed`` (``replica_failure``) by the cluster's
  :class:`~lyra_simpy.cluster.dispatch.FailoverConfig`. Repaired, it serves again with
  an empty KV pool and a cold prefix cache;
* ``off``: not provisioned (a slot an autoscaler may start).

Only processes change states (through :class:`~lyra_simpy.processes.Cluster`); the
replica's own SimPy process (:meth:`Fleet.loop`) serves while ``serving`` or
``draining`` and sleeps on one event otherwise. :class:`Fleet` logs every change —
``(time_s, replica, state)``, the run's ``replicas`` table — and turns the log into the
summary's ``availability`` (1 − down time / provisioned time; provisioned: any state
but ``off``), ``replica_hours`` (provisioned time) and ``mean_replicas_serving``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import simpy

from lyra_simpy.cluster.dispatch import Dispatcher
from lyra_simpy.engine.replica import FAILURE, Replica
from lyra_simpy.engine.request import Request
from lyra_simpy.engine.timing import PROCESS_PRIORITY, PhaseEvent, Process
from lyra_simpy.metrics.collector import Collector

State = Literal["off", "starting", "serving", "draining", "down"]
STATES: tuple[State, ...] = ("off", "starting", "serving", "draining", "down")
_CODE = {name: i for i, name in enumerate(STATES)}


class Fleet:
    """The replicas of a managed cluster and their states: the first *initial* serve
    from the start, the rest are ``off``."""

    def __init__(
        self,
        env: simpy.Environment,
        replicas: Sequence[Replica],
        dispatcher: Dispatcher,
        collector: Collector,
        initial: int,
    ) -> None:
        assert dispatcher.failover is not None
        self.env = env
        self.replicas = list(replicas)
        self.dispatcher = dispatcher
        self.failover = dispatcher.failover
        self.collector = collector
        self.times_s: list[float] = []
        self.who: list[int] = []
        self.states: list[State] = []
        self._wake: list[simpy.Event | None] = [None] * len(self.replicas)
        self._starts: list[simpy.Event | None] = [None] * len(self.replicas)
        self.sources = dispatcher.sources
        """Each replica's share of the requests (``closed`` while it takes none)."""
        for i, replica in enumerate(self.replicas):
            state: State = "serving" if i < initial else "off"
            replica.state = state
            self.sources[i].closed = state != "serving"
            self._log(i, state)

    def _log(self, i: int, state: State) -> None:
        self.times_s.append(float(self.env.now))
        self.who.append(i)
        self.states.append(state)

    def _set(self, i: int, state: State) -> None:
        replica = self.replicas[i]
        replica.state = state
        self._log(i, state)
        if state == "serving":
            self.sources[i].closed = False
            wake = self._wake[i]
            if wake is not None and not wake.triggered:
                wake.succeed()
            if self.dispatcher.held:
                self.dispatcher.route_soon()

    # -- the replica's process ------------------------------------------------------
    def loop(self, i: int) -> Process:
        """Replica *i*'s SimPy process: it serves while ``serving`` or ``draining``
        (``off`` once drained) and otherwise sleeps until it serves again."""
        replica = self.replicas[i]
        while True:
            if replica.state == "serving" or replica.state == "draining":
                try:
                    yield from replica.run()
                except simpy.Interrupt as exc:
                    if exc.cause != FAILURE:
                        raise
                    continue
                self._set(i, "off")  # run() returns only once drained
                continue
            wake = self._wake[i] = self.env.event()
            # (a failure in the instant of a repair finds it here, not yet resumed)
            with contextlib.suppress(simpy.Interrupt):
                yield wake

    # -- what processes do (through processes.Cluster) -----------------------------
    def fail(self, i: int) -> bool:
        """Replica *i* fails now (False: it is off or down already, nothing happens)."""
        replica = self.replicas[i]
        was = replica.state
        if was == "off" or was == "down":
            return False
        self._set(i, "down")
        self._starts[i] = None
        if was == "serving" or was == "draining":
            held = replica.stop()
            assert replica.process is not None
            replica.process.interrupt(FAILURE)
            self._evict(i, held)
        return True

    def repair(self, i: int) -> bool:
        """Replica *i*, down, serves again now, cold (False: it was not down)."""
        if self.replicas[i].state != "down":
            return False
        self._set(i, "serving")
        return True

    def start(self, i: int, startup_s: float) -> bool:
        """Replica *i*, off, starts now and serves *startup_s* later (False: not off)."""
        if self.replicas[i].state != "off":
            return False
        if startup_s <= 0:
            self._set(i, "serving")
            return True
        self._set(i, "starting")
        timer = PhaseEvent(self.env, startup_s, PROCESS_PRIORITY)
        self._starts[i] = timer
        assert timer.callbacks is not None
        timer.callbacks.append(lambda event: self._started(i, event))
        return True

    def _started(self, i: int, timer: simpy.Event) -> None:
        if self._starts[i] is timer:  # (not failed or drained meanwhile)
            self._starts[i] = None
            self._set(i, "serving")

    def drain(self, i: int) -> bool:
        """Replica *i* takes no new request and goes ``off`` once it has run what it
        holds (one starting is stopped at once); False: it was neither."""
        replica = self.replicas[i]
        if replica.state == "starting":
            self._starts[i] = None
            self._set(i, "off")
            return True
        if replica.state != "serving":
            return False
        self._set(i, "draining")
        self.sources[i].closed = True
        self.sources[i].wake()  # an idle replica sees it at once
        return True

    def _evict(self, i: int, held: list[Request]) -> None:
        """The requests of failed replica *i*: routed again, or ``failed``."""
        failover, collector, dispatcher = self.failover, self.collector, self.dispatcher
        for req in held:
            collector.assign(req, i)
            streamed = req.first_token_s is not None
            if req.retries < failover.max_retries and (failover.retry_streaming or not streamed):
                again = Request(
                    req.index, req.request_id, req.arrival_s, req.input_tokens,
                    req.output_tokens, cached_tokens=req.cached_tokens,
                    preemptions=req.preemptions, keys=req.keys,
                )  # fmt: skip
                again.retries = req.retries + 1
                collector.retry(again)
                dispatcher.resubmit(again)
            else:
                dispatcher.fail(req, "replica_failure")

    # -- the record -----------------------------------------------------------------
    def table(self) -> dict[str, npt.NDArray[Any]]:
        """Every state change: ``time_s``, ``replica``, ``state`` (code into
        :data:`STATES`), and ``serving`` (replicas serving after it)."""
        serving = []
        now = [False] * len(self.replicas)
        for i, state in zip(self.who, self.states, strict=True):
            now[i] = state == "serving"
            serving.append(sum(now))
        return {
            "time_s": np.array(self.times_s, dtype=np.float64),
            "replica": np.array(self.who, dtype=np.int64),
            "state": np.array([_CODE[s] for s in self.states], dtype=np.int64),
            "serving": np.array(serving, dtype=np.int64),
        }

    def summary(self, end_s: float) -> dict[str, float | None]:
        """``availability``, ``replica_hours`` and ``mean_replicas_serving`` over
        [0, *end_s*] (None over no time)."""
        return state_summary(self.times_s, self.who, self.states, len(self.replicas), end_s)


def state_summary(
    times_s: Sequence[float],
    who: Sequence[int],
    states: Sequence[State],
    n: int,
    end_s: float,
) -> dict[str, float | None]:
    """Time in each state, summed over the *n* replicas, from the log of changes (each
    replica's first entry at 0), as the summary's ``availability`` (1 − down /
    provisioned), ``replica_hours`` (provisioned) and ``mean_replicas_serving``."""
    spent = dict.fromkeys(STATES, 0.0)
    since = [0.0] * n
    current: list[State] = ["off"] * n
    for t, i, state in zip(times_s, who, states, strict=True):
        t = min(t, end_s)
        spent[current[i]] += t - since[i]
        since[i], current[i] = t, state
    for i in range(n):
        spent[current[i]] += end_s - since[i]
    provisioned = sum(v for k, v in spent.items() if k != "off")
    return {
        "availability": 1.0 - spent["down"] / provisioned if provisioned > 0 else None,
        "replica_hours": provisioned / 3600.0,
        "mean_replicas_serving": spent["serving"] / end_s if end_s > 0 else None,
    }
