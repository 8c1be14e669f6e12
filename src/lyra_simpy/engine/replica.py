"""The replica process: at most one SimPy timeout per engine iteration.

Each loop: take the arrivals that are due (:mod:`~lyra_simpy.engine.intake`), ask the
scheduler for a plan, allocate KV, charge the cost model (:meth:`Replica._step`), sleep
for the iteration, then emit tokens (:meth:`Replica._commit`, :meth:`Replica._emit`),
finish requests and free their blocks. An idle replica sleeps until the next known
arrival (no polling).

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

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import simpy

from lyra_simpy.cost.base import BatchShape, CostModel
from lyra_simpy.engine.decode_clock import DecodeSet
from lyra_simpy.engine.fused import DecodeRun
from lyra_simpy.engine.intake import Intake
from lyra_simpy.engine.kv import BlockPool
from lyra_simpy.engine.request import RejectReason, Request
from lyra_simpy.engine.runs import Runs
from lyra_simpy.engine.speculative import Speculator
from lyra_simpy.engine.timing import (
    PLAN_PRIORITY,
    PhaseEvent,
    Process,
    delay_until,
    finite_time,
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


class HandOffPort(Protocol):
    """Where a prefill replica of a disaggregated cluster sends requests after their
    first token (:class:`~lyra_simpy.cluster.disagg.HandOff`)."""

    def refusal(self, req: Request) -> RejectReason | None:
        """Why no decode replica can ever take *req* (None: one can)."""
        ...

    def hand_off(self, req: Request, prefill: Replica, now_s: float) -> None:
        """*req* emitted its first token on *prefill* at *now_s*: send its KV on."""
        ...


class Replica(Runs):
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
        if self.arrival_cost_s and (rules.fuse or not hasattr(source, "arrivals_before")):
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

    @property
    def _steady(self) -> bool:
        """Every running request is decoding."""
        return self.decoding.n == len(self.running)

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

    # -- one iteration ----------------------------------------------------------------
    def _step(self, plan: BatchPlan, start: float) -> Process:
        """Run one iteration of *plan*; continue into a fused run when nothing can
        arrive before it ends."""
        kv, bs = self.kv, self.kv.block_size
        waiting, running = self.waiting, self.running
        prefill, decode = plan.prefill, plan.decode
        alloc = prefill_tokens = attention = 0
        cache = self.cache
        for req, tokens in prefill:
            if not req.running:
                if waiting[0] is req:
                    waiting.popleft()
                else:
                    waiting.remove(req)
                req.running = True
                running.append(req)
                if cache is not None and req.keys:
                    alloc += self._acquire(req, cache)
            total = req.computed_tokens + tokens
            need = (total + bs - 1) // bs - req.blocks
            req.blocks += need
            alloc += need
            prefill_tokens += tokens
            attention += tokens * total
        n_dec = len(decode)
        dset = self.decoding
        if n_dec != dset.n:  # not every decoding request decodes: count them one by one
            dset.clear()
        context = dset.context_tokens
        alloc += dset.blocks_needed()
        la = self._lookahead
        for req in decode if not dset.n else ():
            c = req.computed_tokens + 1
            context += c
            if la:  # speculative lookahead: slots for the drafts it can still use
                c += min(la, req.output_tokens - req.generated_tokens - 1)
            need = (c + bs - 1) // bs - req.blocks
            if need:
                req.blocks += need
                alloc += need
        kv.allocate(alloc)
        rows = (plan.rows if plan.rows > n_dec else n_dec) if n_dec else 0
        self._prompts_s = None
        if plan.beside and prefill and n_dec:  # prompts beside the decodes: the longer part
            prompts = self.cost.iteration_s(
                BatchShape(len(prefill), prefill_tokens, attention, 0, 0, 0)
            )
            decodes = self.cost.decode_span_s(rows, context, n_dec, 1)[0]
            self._prompts_s = prompts
            duration = prompts if prompts > decodes else decodes
        elif la and n_dec:  # verify the drafts (like prompt tokens) and run the draft steps
            shape = BatchShape(
                len(prefill), prefill_tokens, attention, n_dec, rows, context, la * n_dec
            )
            assert self.spec is not None
            duration = self.cost.iteration_s(shape) + self.spec.draft_s
        elif prefill or plan.passes != 1 or plan.checkpoints or plan.output_passes != 1:
            shape = BatchShape(
                len(prefill), prefill_tokens, attention, n_dec, rows, context, 0,
                plan.passes, plan.checkpoints, plan.prefill_attention_cells, plan.output_passes,
                plan.prefill_computed_cells,
            )  # fmt: skip
            duration = self.cost.iteration_s(shape)
        else:
            duration = self.cost.decode_span_s(rows, context, n_dec, 1)[0]
        cost = self.arrival_cost_s
        if cost:  # each request reaching the engine meanwhile lengthens the iteration
            charged = 0
            while True:
                n = self.source.arrivals_before(start + duration)  # type: ignore[attr-defined]
                if n <= charged:
                    break
                duration += (n - charged) * cost
                charged = n
        end = finite_time(start, start + duration)
        nxt = self.source.next_s()
        if (
            self.fuse
            and not waiting
            and not self.intake.deferred
            and not self.strict_horizon  # (a cluster's router must see ends at their time)
            and (nxt is None or nxt > end)
            and (self.stop_s is None or end < self.stop_s)
        ):
            # Nothing can reach this replica before the iteration ends: commit it now
            # and go on into a fused run, sleeping once for both.
            self._commit(plan, start, end)
            nxt = self.source.next_s()
            if (
                running
                and self._steady
                and (nxt is None or nxt > end)
                and (yield from self._fused_run(start, duration, end, plan.rows, self._absorb))
            ):
                return
            yield self.env.timeout(duration)
            return
        yield self.env.timeout(duration)
        self._commit(plan, start, self.env.now)

    def _commit(self, plan: BatchPlan, start: float, end: float) -> None:
        """Emit the tokens of the iteration of *plan* that ran from *start* to *end*."""
        collector, dset = self.collector, self.decoding
        prefill, decode = plan.prefill, plan.decode
        n_dec = len(decode)
        common = prefill_tokens = 0
        done: list[Request] = []
        as_set = dset.n > 0
        if as_set:  # the decode set decoded (it is the whole decode list, see _step)
            last = dset.last_emit_s
            if last == start:
                common = dset.n
            else:
                collector.itl(end - last, dset.n)
            done = dset.advance([end])
        elif self.spec is not None:
            for req, accepted in zip(decode, self.spec.accepted(n_dec), strict=True):
                n = min(1 + accepted, req.output_tokens - req.generated_tokens)
                req.computed_tokens += n
                common += self._emit(req, start, end, done, n)
        else:
            for req in decode:
                req.computed_tokens += 1
                common += self._emit(req, start, end, done)
        dset.last_emit_s = end
        cache = self.cache
        handoff = self.handoff
        leaving: list[Request] = []
        emitted: list[Request] = []
        log = collector.log
        # Prompts run beside the decodes (BatchPlan.beside) end when their own part does.
        beside = self._prompts_s
        prompts_end = end if beside is None else start + beside
        for req, tokens in prefill:
            prefill_tokens += tokens
            req.computed_tokens += tokens
            if cache is not None and req.keys:  # its full units are cached as computed
                self.kv.release(-cache.insert(req, req.computed_tokens // cache.unit_tokens))
            complete = req.computed_tokens == req.input_tokens + req.generated_tokens
            if log is not None:
                log.chunk(req, start, prompts_end, tokens, complete)
            if complete:
                common += self._emit(req, start, prompts_end, done)
                emitted.append(req)
        if common:
            collector.itl(end - start, common)
        collector.iteration(
            self.replica_id, start, end, len(prefill) + n_dec, prefill_tokens, n_dec,
            self.kv.used, len(self.waiting),
        )  # fmt: skip
        # Requests that emitted and go on decoding join the set (last token: end).
        for req in () if as_set or self.spec is not None else decode:
            if req.generated_tokens < req.output_tokens:
                dset.join(req)
        for req in emitted:
            # Only a request that emitted now: one whose chunk ended a recompute one
            # token short of emitting decodes next, but last emitted before (its ITL).
            # (Told by the emission itself, not by its time: an iteration may cost 0.)
            if req.generated_tokens < req.output_tokens:
                if handoff is not None:
                    leaving.append(req)  # its first token: on to a decode replica
                elif self.spec is None and beside is None:
                    # (beside: its last token is not the set's; decoded one by one once)
                    dset.join(req)
        if done:
            self._finish(done)
        for req in leaving:
            assert handoff is not None
            req.running = False
            self.running.remove(req)
            handoff.hand_off(req, self, end)

    def _emit(self, req: Request, start: float, end: float, done: list[Request], n: int = 1) -> int:
        """Emit a chunk of *n* tokens of *req* at *end* (one inter-token gap); returns 1
        when that gap equals the iteration."""
        common = 0
        gen = req.generated_tokens
        if gen == 0:
            req.first_token_s = end
        elif req.last_token_s == start:
            common = 1
        else:
            self.collector.itl(end - req.last_token_s, 1)
        req.generated_tokens = gen + n
        req.last_token_s = end
        if gen + n == req.output_tokens:
            done.append(req)
        return common

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
