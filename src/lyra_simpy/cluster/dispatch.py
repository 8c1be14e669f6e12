"""Many replicas behind a router: the dispatcher and the per-replica sources.

The workload's source feeds a :class:`Dispatcher`. At each arrival time it asks the
router (:mod:`lyra_simpy.cluster.routing`) for a replica and hands the request to that
replica's :class:`RoutedSource`. Every instant runs in three phases, whatever order the
replicas' events were scheduled in (:class:`~lyra_simpy.engine.PhaseEvent`): replicas
commit the iterations ending then (finishes; a closed loop's next request), the
dispatcher routes the arrivals due, and replicas plan their next iterations — so a
replica sees a request arriving exactly when its iteration ends, as a single replica
reading the source would, and the router reads every replica's state as it is at that
instant. A router that reads no state routes ahead, and each replica's fused runs end
before its own next request. For one that reads state, fused runs are carried across
arrivals (``Dispatcher.carry``): a run's finishes and KV use are planned ahead, so the
loads at an arrival are read from the plan without ending it, and only the replica the
arrival goes to ends its run there, where a stepped engine would take it. One routing
event per arrival time, none per token.

With processes (:mod:`lyra_simpy.processes`) replicas come and go: the dispatcher is
*managed* (:class:`FailoverConfig`). It routes only to serving replicas (never to one
that is down, starting, draining or off), routes at each arrival (never ahead: a
replica may fail before the request arrives) and carries fused runs across arrivals
whatever the router. A request finding no replica serving waits at the router until
one serves (or fails ``no_replica`` after ``no_replica_timeout_s``); the requests a
failed replica held come back here to be routed again, up to ``max_retries`` times. The
run ends when the workload is over and every request has ended (:attr:`Dispatcher.finished`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import simpy
from pydantic import ConfigDict, NonNegativeFloat, NonNegativeInt

from lyra_simpy.cluster.routing import ReplicaLoad, Router
from lyra_simpy.config import Closed
from lyra_simpy.engine.request import Request
from lyra_simpy.engine.timing import ROUTE_PRIORITY, PhaseEvent, delay_at_least
from lyra_simpy.metrics.collector import Collector
from lyra_simpy.workload.source import Source


class FailoverConfig(Closed):
    """What the router does when replicas fail or none serves (``cluster.failover``;
    used only when processes are on, :mod:`lyra_simpy.processes`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_retries: NonNegativeInt = 1
    """Times a request on a failed replica is routed again before it ends ``failed``
    (``replica_failure``). Default 1: Envoy's retry policy default (``num_retries: 1``)."""
    retry_streaming: bool = False
    """Retry a request that already streamed tokens too (its stream starts over: its
    TTFT becomes the retry's first token). Default off: a gateway such as Envoy retries
    only before the response started, so such a request fails with its replica."""
    no_replica_timeout_s: NonNegativeFloat | None = None
    """A request finding no replica serving waits at the router for one; after this many
    seconds it ends ``failed`` (``no_replica``). None: it waits as long as it takes (at
    the end of a run with no ``until_s`` a request still waiting fails ``no_replica``)."""


class RoutedSource:
    """A replica's share of the cluster's requests (the ``Source`` protocol)."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        self.queue: deque[Request] = deque()
        """Requests routed here and not yet taken by the replica."""
        self._event: simpy.Event | None = None
        self.feedback = dispatcher.upstream.feedback

        self.closed = False
        """No request will be routed here any more (the replica drains)."""

    @property
    def done(self) -> bool:
        return (self._dispatcher.exhausted or self.closed) and not self.queue

    def pop_until(self, now_s: float) -> list[Request]:
        queue = self.queue
        out = []
        while queue and queue[0].arrival_s <= now_s:
            out.append(queue.popleft())
        return out

    def next_s(self) -> float | None:
        """The next time a request may reach this replica: its own queue's head, or the
        cluster's next arrival (which the router may send here); routing ahead, the
        next arrival routed here."""
        d = self._dispatcher
        upcoming = d.route_ahead(self) if d.lookahead else d.upstream.next_s()
        if self.queue:
            head = self.queue[0].arrival_s
            return head if upcoming is None else min(head, upcoming)
        return upcoming

    def carry_horizon_s(self) -> float | None:
        """Where a fused run carried across arrivals is planned to (it ends sooner if
        an arrival is routed here): this replica's own next request, or the cluster's
        arrival ``CARRY_AHEAD`` replicas' worth of arrivals on."""
        if self.queue:
            return self.queue[0].arrival_s
        return self._dispatcher.peek_s(self._dispatcher.CARRY_AHEAD * len(self._dispatcher.sources))

    def on_finish(self, now_s: float) -> None:
        self._dispatcher.on_finish(now_s)

    def arrivals_pending(self) -> bool:
        """Whether a request may still reach this replica later: one routed here and not
        yet arrived, or any arrival of the cluster not yet due (a router reading the
        replicas' state may send it here). Routed ahead, the answer is the same although
        the dispatcher knows where each request goes, so routing ahead changes nothing
        (a static batch waits for further arrivals while any is known, DESIGN §3)."""
        d = self._dispatcher
        return bool(self.queue) or bool(d.ahead) or d.upstream.next_s() is not None

    def arrival_event(self) -> simpy.Event | None:
        """An event triggered when a request is routed here, the workload ends, or
        :meth:`wake` is called (KV freed elsewhere); None: a request is already queued."""
        if self.queue and self.queue[0].arrival_s <= self._dispatcher.env.now:
            return None
        if self._event is None:
            self._event = self._dispatcher.env.event()
        return self._event

    def push(self, req: Request) -> None:
        self.queue.append(req)
        self.wake()

    def wake(self) -> None:
        event, self._event = self._event, None
        if event is not None and not event.triggered:
            event.succeed()


class HandedSource(RoutedSource):
    """A decode replica's source: requests come from the hand-off queue, at any time
    until the run ends (it is never done; an idle decode replica just waits)."""

    @property
    def done(self) -> bool:
        return False


class Dispatcher:
    """Routes every arrival of *upstream* to one of the replicas, at its arrival time.

    *loads* returns each replica's :class:`ReplicaLoad` at the moment of the call.

    With *lookahead* (a router that does not read the replicas' state, an open-loop
    source) it routes requests before they arrive, in arrival order — the same
    decisions, the same random draws — into their replica's queue, and at each arrival
    time only wakes the replica: a replica then runs until its own next request
    instead of the cluster's (far fewer, longer fused runs; identical results)."""

    #: Arrivals routed ahead for one replica's next request before giving up (the
    #: cluster's next arrival is the horizon then); a random router over n replicas
    #: misses a replica n times in a row with probability (1 - 1/n)^n < e^-1.
    AHEAD_PER_REPLICA = 8
    #: Carried fused runs are planned this many arrivals per replica ahead: a router
    #: spreading the load sends a replica about one arrival in n, and planning much
    #: further would be wasted when the next one comes (the horizon changes no result).
    CARRY_AHEAD = 2
    #: Carry fused runs across arrivals for a router that reads the replicas' state
    #: (False: every run ends before the cluster's next arrival; the tests compare both).
    CARRY_RUNS = True

    def __init__(
        self,
        env: simpy.Environment,
        upstream: Source,
        router: Router,
        loads: Callable[[], Sequence[ReplicaLoad]],
        lookahead: bool = False,
        failover: FailoverConfig | None = None,
        collector: Collector | None = None,
    ) -> None:
        self.env = env
        self.upstream = upstream
        self.router = router
        self._loads = loads
        managed = failover is not None
        self.lookahead = (
            lookahead and not router.reads_state and not upstream.feedback and not managed
        )
        self.carry = (lookahead or managed) and not upstream.feedback
        self.carry = self.carry and (managed or (router.reads_state and self.CARRY_RUNS))
        """The replicas' fused runs go on across arrivals (a router reading state, or a
        managed cluster; an open-loop source); the loads are read from the runs' plans,
        and a run is cut where an arrival is routed to its replica
        (:meth:`~lyra_simpy.engine.replica.Replica.cut_run`)."""
        self.failover = failover
        """Managed (processes on): replicas come and go (see the module docstring)."""
        self.collector = collector
        self.held: deque[tuple[Request, float]] = deque()
        """Requests waiting for a replica to serve, with when they give up (inf: never)."""
        self.retrying: deque[Request] = deque()
        """Requests of a failed replica, to be routed again in this instant's routing."""
        self.outstanding = 0
        """Requests taken from the workload and not ended (managed)."""
        self.finished = env.event()
        """Triggered, when managed, once the workload is over and every request ended."""
        self._soon = False
        self._told_done = False
        self.ahead: deque[tuple[float, RoutedSource]] = deque()
        """Requests routed ahead and not yet arrived: (arrival time, their source)."""
        self.sources: list[RoutedSource] = []
        self.exhausted = upstream.done
        """No request will reach any replica any more (from the router)."""
        self._wakes: set[float] = set()
        self.routed: list[int] = []
        """Requests sent to each replica."""
        self.replicas: list[Any] = []
        """The replicas routed over (set by whoever builds the cluster)."""
        self.mixed = False
        """The replicas differ in what they can serve (KV pools, schedulers): each
        arrival is checked against every replica and routed among those that can serve
        it (set by whoever builds the cluster)."""

    def add_replica(self) -> RoutedSource:
        source = RoutedSource(self)
        self.sources.append(source)
        self.routed.append(0)
        return source

    def start(self) -> None:
        self._schedule()
        self._check_finished()

    def route_ahead(self, source: RoutedSource) -> float | None:
        """Route arrivals ahead until one is for *source* (or a bound is reached): the
        time of the cluster's next arrival not yet routed (None: all are)."""
        limit = self.AHEAD_PER_REPLICA * len(self.sources)
        upstream = self.upstream
        while not source.queue and len(self.ahead) < limit:
            nxt = upstream.next_s()
            if nxt is None:
                break
            for req in upstream.pop_until(nxt):
                target = self._assign(req)
                assert target is not None
                target.queue.append(req)
                self.ahead.append((req.arrival_s, target))
        return upstream.next_s()

    def route_due(self, now: float) -> None:
        """Route every arrival due by *now*, in arrival order (routed ahead: wake the
        replicas whose requests arrive now)."""
        ahead = self.ahead
        while ahead and ahead[0][0] <= now:
            ahead.popleft()[1].wake()
        if self.failover is not None:
            self._route_managed(now)
            return
        while due := self.upstream.pop_until(now):
            for req in due:
                self._assign(req).push(req)  # type: ignore[union-attr]

    def _route_managed(self, now: float) -> None:
        """Route the requests waiting for a replica (if one serves now), those of a
        failed replica, then the arrivals due."""
        if self.held and any(r.state == "serving" for r in self.replicas):
            held, self.held = self.held, deque()
            for req, _ in held:
                self._assign(req).push(req)  # type: ignore[union-attr]
        while self.retrying:
            self._route_or_hold(self.retrying.popleft(), now)
        while due := self.upstream.pop_until(now):
            self.outstanding += len(due)
            for req in due:
                self._route_or_hold(req, now)

    def _route_or_hold(self, req: Request, now: float) -> None:
        target = self._assign(req)
        if target is not None:
            target.push(req)
            return
        assert self.failover is not None
        timeout = self.failover.no_replica_timeout_s
        self.held.append((req, now + timeout if timeout is not None else float("inf")))
        if timeout is not None:
            event = PhaseEvent(self.env, delay_at_least(now, now + timeout), ROUTE_PRIORITY)
            assert event.callbacks is not None
            event.callbacks.append(self._expire)

    def _expire(self, _event: simpy.Event) -> None:
        """Requests that waited ``no_replica_timeout_s`` for a replica end ``failed``."""
        now = self.env.now
        while self.held and self.held[0][1] <= now:
            self.fail(self.held.popleft()[0], "no_replica")

    def fail(self, req: Request, reason: Any) -> None:
        """*req* ends ``failed`` now."""
        assert self.collector is not None
        self.collector.fail(req, reason)
        self.on_finish(self.env.now)

    def resubmit(self, req: Request) -> None:
        """*req* comes back from a failed replica: route it again at this instant."""
        self.retrying.append(req)
        self.route_soon()

    def route_soon(self) -> None:
        """Route at this instant (a replica started serving, or requests came back)."""
        if self._soon:
            return
        self._soon = True
        event = PhaseEvent(self.env, 0.0, ROUTE_PRIORITY)
        assert event.callbacks is not None
        event.callbacks.append(self._wake)

    def arrivals_changed(self) -> None:
        """The workload's times not yet due moved (a process changed the rate)."""
        self._schedule()

    def _check_finished(self) -> None:
        if (
            self.failover is not None
            and self.upstream.done
            and not self.outstanding
            and not self.held
            and not self.retrying
            and not self.finished.triggered
        ):
            self.finished.succeed()

    def _assign(self, req: Request) -> RoutedSource | None:
        """The replica's source *req* goes to, counted; the replicas' loads are read
        only for a router that reads them. Managed: among the serving replicas (None:
        none serves)."""
        allowed = None
        if self.failover is not None:
            up = [r.state == "serving" for r in self.replicas]
            if not any(up):
                return None
            if not all(up):
                allowed = up
        if self.mixed:
            can = [r.refusal(req) is None for r in self.replicas]
            if allowed is not None:
                both = [a and c for a, c in zip(allowed, can, strict=True)]
                if any(both):
                    allowed = both
            elif any(can) and not all(can):
                allowed = can
        loads = self._loads() if self.router.reads_state else ()
        router = self.router
        i = router.route(req, loads) if allowed is None else router.route(req, loads, allowed)
        self.routed[i] += 1
        if self.carry:
            self.replicas[i].cut_run(self.env.now)
        return self.sources[i]

    def peek_s(self, k: int) -> float | None:
        """The arrival time *k* arrivals after the cluster's next one, as far as known
        (None: no arrival is known)."""
        return self.upstream.peek_s(k)

    def on_finish(self, now: float) -> None:
        """A request ended on some replica (closed loops send the next one: routed in
        this instant's routing phase)."""
        self.upstream.on_finish(now)
        self._schedule()
        if self.failover is not None:
            self.outstanding -= 1
            self._check_finished()

    def _schedule(self) -> None:
        nxt = self.upstream.next_s()
        if self.ahead and (nxt is None or self.ahead[0][0] < nxt):
            nxt = self.ahead[0][0]
        if nxt is None:
            if self.upstream.done and not self.exhausted and not self._told_done:
                # (managed: a failed replica's requests may still come back, so the
                # replicas are told, for a static batch not to wait, but go on)
                self.exhausted = self.failover is None
                self._told_done = True
                for source in self.sources:
                    source.wake()
            return
        if any(t <= nxt for t in self._wakes):
            return  # a wake-up at or before it is already due
        now = self.env.now
        event = PhaseEvent(self.env, delay_at_least(now, nxt), ROUTE_PRIORITY)
        self._wakes.add(nxt)
        assert event.callbacks is not None
        event.callbacks.append(self._wake)

    def _wake(self, _event: simpy.Event) -> None:
        self._soon = False
        now = self.env.now
        self._wakes = {t for t in self._wakes if t > now}
        self.route_due(self.env.now)
        self._schedule()


def replica_loads(replicas: Sequence[Any]) -> list[ReplicaLoad]:
    """The :class:`ReplicaLoad` of each replica (engine objects) right now; a replica
    in a fused run carried across arrivals, as its plan says stepping would show it."""
    out = []
    for r in replicas:
        outstanding = len(r.source.queue) + len(r.waiting) + len(r.running) + len(r.deferred)
        kv = r.kv
        if r.live is None:
            out.append(ReplicaLoad(outstanding, kv.num_blocks - kv.used, kv.num_blocks))
        else:
            finished, used = r.live.state_at(r.env.now)
            out.append(ReplicaLoad(outstanding - finished, kv.num_blocks - used, kv.num_blocks))
    return out
