"""The replica process: at most one SimPy timeout per engine iteration.

Each loop: take the arrivals that are due (:mod:`~lyra_simpy.engine.intake`), ask the
scheduler for a plan, and run it (:mod:`~lyra_simpy.engine.iteration`: allocate KV,
charge the cost model, sleep for the iteration, emit tokens, finish requests and free
their blocks). An idle replica sleeps until the next known arrival (no polling).

Decoding requests are kept in a :class:`~lyra_simpy.engine.decode_clock.DecodeSet`: an
iteration advances all of them by one clock tick instead of touching each.

*Fused runs* (DESIGN §6). Once every running request is decoding and nothing waits,
the batch cannot change before the next arrival is due except by requests finishing
(open loop) or by the KV pool running out. The engine then advances all those
iterations as one event (planned by :func:`~lyra_simpy.engine.fused.plan_run`, a pure
function; slept and committed here), and an iteration that admitted
requests continues straight into such a run when no arrival is due at its end. This
relies on one rule every scheduler keeps: *with nothing waiting and every running
request decoding, the next plan decodes every running request* (unless KV is short, in
which case the engine asks the scheduler). A plan that decodes every running request
and admits nothing is continued as a fused run too when the scheduler declares
``holds_back_until_change`` (nothing can make room for a waiting request before an
arrival or a completion) — unless it preempted: a scheduler admits nothing in an
iteration that preempts, but may admit in the next. In a cluster a run either ends
before the next arrival (``strict_horizon``) or is carried across arrivals (``carry``:
the router reads the plan, and an arrival routed here cuts the run short). Every
observable — token times, ITL, time series, summaries — is identical to stepping one
by one (``fuse_iterations: false``); a property test checks it for every registered
scheduler.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import simpy

from lyra_simpy.cost.base import CostModel
from lyra_simpy.engine.decode_clock import DecodeSet
from lyra_simpy.engine.fused import DecodeRun
from lyra_simpy.engine.intake import Intake
from lyra_simpy.engine.iteration import HandOffPort, Iterations
from lyra_simpy.engine.kv import BlockPool
from lyra_simpy.engine.request import RejectReason, Request
from lyra_simpy.engine.speculative import Speculator
from lyra_simpy.engine.timing import (
    PLAN_PRIORITY,
    PhaseEvent,
    Process,
    delay_until,
)
from lyra_simpy.errors import SimulationError
from lyra_simpy.metrics.collector import Collector
from lyra_simpy.policies.admission import Admission
from lyra_simpy.policies.base import BatchPlan, EngineView, Scheduler
from lyra_simpy.policies.prefix_cache import PrefixCache
from lyra_simpy.workload.source import Feed, RoutedFeed

FAILURE = "failure"
"""The cause of the interrupt that fails a replica (:mod:`lyra_simpy.cluster.lifecycle`);
a carried fused run's cut (:meth:`Replica.cut_run`) has none."""


@dataclass(frozen=True, slots=True)
class Policies:
    """What decides and what costs: the replica's pluggable parts."""

    scheduler: Scheduler
    cost: CostModel
    admission: Admission | None = None
    """Asked about every arrival (None, or one that admits all: nothing asked)."""
    cache: PrefixCache | None = None
    """The prefix cache (None: off); the KV pool evicts from it (see kv.py)."""
    speculator: Speculator | None = None
    """Speculative decoding (None: one token per decode step)."""


@dataclass(frozen=True, slots=True)
class Rules:
    """How the replica's clock may run."""

    fuse: bool = True
    """Fuse decode iterations into runs (DESIGN §6; ``simulation.fuse_iterations``)."""
    stop_s: float | None = None
    """The run stops here (``env.run(until=...)``): no iteration is fused past it."""
    strict_horizon: bool = False
    """A fused run ends before the first iteration that reaches the next arrival (a
    cluster's router reads this replica's state then: it must be committed)."""
    arrival_cost_s: float = 0.0
    """Time each request reaching the engine adds to the iteration under way
    (``workload.request_path_ms`` × ``request_path_cpu_share``; 0: none). Needs a source
    that knows its arrivals (a single engine) and no fused runs."""
    wake_after_s: float = 0.0
    wake_s: float = 0.0
    """The first iteration after the engine ran nothing for ``wake_after_s`` or more
    takes ``wake_s`` longer (``cost.wake``, :mod:`lyra_simpy.cost.wake`; 0: none)."""


class Replica(Iterations):
    """One serving engine: a scheduler, a KV pool and a cost model, fed by a source."""

    def __init__(
        self,
        env: simpy.Environment,
        replica_id: int,
        policies: Policies,
        kv: BlockPool,
        source: Feed,
        collector: Collector,
        rules: Rules = Rules(),
        handoff: HandOffPort | None = None,
    ) -> None:
        self.env = env
        self.replica_id = replica_id
        scheduler = policies.scheduler
        self.scheduler = scheduler
        self.cost = policies.cost
        self.kv = kv
        self.source = source
        self.collector = collector
        self.fuse = rules.fuse
        self.stop_s = rules.stop_s
        self.strict_horizon = rules.strict_horizon
        self.arrival_cost_s = rules.arrival_cost_s
        self.wake_after_s, self.wake_s = rules.wake_after_s, rules.wake_s
        self.idle_from: float | None = -math.inf if self.wake_s else None
        """Since when the engine has run nothing (None: it is busy, or no wake is
        charged; before the run: it stood idle, so its first iteration pays); the next
        iteration pays ``wake_s`` after ``wake_after_s`` of it."""
        self._arrivals_before = getattr(source, "arrivals_before", None)
        if self.arrival_cost_s and (rules.fuse or self._arrivals_before is None):
            raise SimulationError("an arrival cost needs a single engine's source, unfused")
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        """Requests holding KV, in admission order (newest last)."""
        self.decoding = DecodeSet(kv.block_size)
        """The running requests that are decoding."""
        self._rows = 0
        """``rows`` of the last plan: the batch width a static batch keeps."""
        self.cache = policies.cache
        self.routed: RoutedFeed | None = source if isinstance(source, RoutedFeed) else None
        """The cluster's feed when requests reach it through a router or a hand-off
        (idle: wait to be sent one); None: it reads the workload's times itself."""
        self.handoff = handoff
        """A prefill replica of a disaggregated cluster: requests leave after their first
        token, through this hand-off (None: they stay)."""
        self.on_free: Callable[[], None] | None = None
        """Called when requests finish (a decode replica tells the hand-off queue it
        may have room)."""
        self.scheduler_width: int = scheduler.max_batch
        """Most requests it runs at once."""
        self.spec = policies.speculator
        self._lookahead = self.spec.lookahead if self.spec is not None else 0
        if self.spec is not None or not scheduler.fusable:
            self.fuse = False  # (sequences advance unevenly; or the scheduler says so)
        self._holds_back = scheduler.holds_back_until_change
        """The scheduler keeps waiting requests out until a request finishes or is
        preempted once a plan decoded everyone and admitted nothing (so the decodes
        that follow can be fused though requests wait)."""
        kv.attach(self.cache)
        self._absorb = not source.feedback and self.cache is None
        """Fused runs go on through completions (they cannot make a request arrive;
        with a prefix cache a completion changes what is cached, so a run ends there)."""
        self.intake = Intake(
            replica_id, source, collector, self.waiting, self.running, self.refusal,
            policies.admission, self._view,
        )  # fmt: skip
        """Where requests enter: due arrivals, refusals, admission, deferral."""
        self.carry = False
        """Fused runs go on across a cluster's arrivals (the router reads ``live``)."""
        self.live: DecodeRun | None = None
        """The carried fused run under way (:meth:`cut_run`)."""
        self.process: simpy.Process | None = None
        self.state = "serving"
        """Where the replica is in its life (:mod:`lyra_simpy.cluster.lifecycle`): only
        processes change it; without them it serves all run."""
        self.cold_cache: Callable[[], PrefixCache | None] | None = None
        """Makes the empty prefix cache a failed replica comes back with (None: none)."""
        self._prompts_s: float | None = None
        """The prompts' part of the iteration under way when they ran beside its decodes
        (``BatchPlan.beside``); None otherwise."""
        self.cold_scheduler: Callable[[], Scheduler] | None = None
        """Builds the scheduler a failed replica comes back with (its own state — a
        static batch's members, llama.cpp's slots — is lost with the replica)."""

    @property
    def deferred(self) -> deque[Request]:
        """Requests the admission deferred (held by the intake)."""
        return self.intake.deferred

    # -- process --------------------------------------------------------------------
    def run(self) -> Process:
        env, source, routed, intake = self.env, self.source, self.routed, self.intake
        phased = self.strict_horizon
        while True:
            if phased:  # plan only once every replica committed and arrivals are routed
                yield PhaseEvent(env, 0.0, PLAN_PRIORITY)
            now: float = env.now
            intake.pull(now)
            if not self.running and not self.waiting:
                if self.wake_s and self.idle_from is None:
                    self.idle_from = now
                if intake.deferred:
                    raise SimulationError("admission deferred requests on an idle replica")
                if routed is not None:
                    if routed.done:
                        return
                    event = routed.arrival_event()
                    if event is not None:
                        yield event
                    continue
                nxt = source.next_s()
                if nxt is None:
                    if source.done:
                        return
                    raise SimulationError("replica idle while the source waits on it")
                yield env.timeout(delay_until(now, nxt))
                continue
            steady = self._steady
            if (
                self.fuse
                and steady
                and self.idle_from is None  # (the wake is charged to a planned iteration)
                and not self.waiting
                and not intake.deferred
                and (yield from self._fused_run(now, 0.0, now, self._rows, self._absorb))
            ):
                continue
            view = EngineView(
                now, self.waiting, self.running, self.kv.free, self.kv.block_size,
                source.arrivals_pending(),
                self.decoding.blocks_needed() if steady else None, self.cache,
                self._lookahead,
            )  # fmt: skip
            plan = self.scheduler.plan(view)
            self._rows = plan.rows
            if plan.preempt:
                self._preempt(plan, now)
            if plan.empty:
                if plan.preempt:
                    continue
                if self.wake_s and self.idle_from is None:
                    self.idle_from = now
                target = plan.wait_until_s
                if routed is not None:  # wait to be sent a request or to get KV back
                    event = routed.arrival_event()
                    if event is None:
                        continue
                    if target is not None:
                        event = env.any_of([event, env.timeout(delay_until(now, target))])
                    yield event
                    continue
                nxt = source.next_s()
                if nxt is not None and (target is None or nxt < target):
                    target = nxt
                if target is None or target <= now:
                    raise SimulationError("scheduler ran nothing and gave nothing to wait for")
                yield env.timeout(delay_until(now, target))
                continue
            if (
                self.fuse
                and not intake.deferred
                and not plan.prefill
                and not plan.preempt  # (the next plan may admit what this one held back)
                and (not self.waiting or self._holds_back)
                and len(plan.decode) == len(self.running) == self.decoding.n
            ):
                ran = yield from self._fused_run(now, 0.0, now, plan.rows, False)
                if ran is False:
                    raise SimulationError("scheduler planned decodes the KV pool cannot hold")
                if ran:
                    continue
            yield from self._step(plan, now)

    def _view(self, now: float) -> EngineView:
        """The state the admission policy reads at *now*."""
        return EngineView(
            now, self.waiting, self.running, self.kv.free, self.kv.block_size,
            self.source.arrivals_pending(),
        )  # fmt: skip

    def refusal(self, req: Request) -> RejectReason | None:
        """Why *req* can never be served here (None: it can). A prefill replica holds
        only the prompt, and asks the hand-off whether some decode replica can take it."""
        kv = self.kv
        prefill_only = self.handoff is not None
        reason = self.scheduler.refusal(req, kv.num_blocks, kv.block_size, prefill_only)
        if reason is None and self.handoff is not None:
            reason = self.handoff.refusal(req)
        return reason

    def _preempt(self, plan: BatchPlan, now: float) -> None:
        requeue = self.waiting.append if plan.preempt_to_back else self.waiting.appendleft
        log = self.collector.log
        for victim in plan.preempt:
            if log is not None:
                log.preempt(victim, now)
            if victim.member_of is not None:
                self.decoding.leave(victim)
            self._release(victim)
            victim.blocks = 0
            victim.computed_tokens = 0
            victim.preemptions += 1
            victim.running = False
            self.running.remove(victim)
            requeue(victim)

    def receive(self, req: Request) -> None:
        """A decode replica takes *req*, its prompt's KV arrived (blocks reserved)."""
        assert self.routed is not None
        self.routed.push(req)

    def release_handed_off(self, req: Request) -> None:
        """A prefill replica frees the KV of *req*, sent to a decode replica."""
        assert self.routed is not None
        self._release(req)
        req.blocks = 0
        self.routed.wake()
