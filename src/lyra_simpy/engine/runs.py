"""What a replica does with requests that leave it, and with its runs of fused decodes:
freeing KV (and caching the prompt's prefix), finishing requests, sleeping and committing
a fused run (planned by :func:`~lyra_simpy.engine.fused.plan_run`), cutting one short when
a request is routed in, and stopping at once when the replica fails.

A mixin of :class:`~lyra_simpy.engine.replica.Replica`, kept apart so each module holds one
concept; the attributes it reads are the replica's, declared here for the type checker.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from operator import sub

import simpy

from lyra_simpy.cost.base import CostModel
from lyra_simpy.engine.decode_clock import DecodeSet
from lyra_simpy.engine.fused import DecodeRun, plan_run
from lyra_simpy.engine.intake import Intake
from lyra_simpy.engine.kv import BlockPool
from lyra_simpy.engine.request import Request
from lyra_simpy.engine.timing import Process, exact_delay, timeout_at
from lyra_simpy.metrics.collector import Collector
from lyra_simpy.policies.base import Scheduler
from lyra_simpy.policies.prefix_cache import PrefixCache
from lyra_simpy.workload.source import Feed, RoutedFeed


class Runs:
    """Releasing, finishing, fused runs and failure of a replica (see the module)."""

    env: simpy.Environment
    replica_id: int
    scheduler: Scheduler
    cost: CostModel
    kv: BlockPool
    cache: PrefixCache | None
    source: Feed
    routed: RoutedFeed | None
    collector: Collector
    intake: Intake
    waiting: deque[Request]
    running: list[Request]
    decoding: DecodeSet
    stop_s: float | None
    strict_horizon: bool
    carry: bool
    live: DecodeRun | None
    process: simpy.Process | None
    on_free: Callable[[], None] | None
    cold_cache: Callable[[], PrefixCache | None] | None
    cold_scheduler: Callable[[], Scheduler] | None
    _rows: int

    def _acquire(self, req: Request, cache: PrefixCache) -> int:
        """Start *req* from its cached prefix; returns the blocks that stop being
        evictable (the scheduler planned with the same lookup)."""
        units, _ = cache.lookup(req)
        if not units:
            return 0
        moved = cache.acquire(req, units)
        hit = units * cache.unit_tokens
        req.computed_tokens = hit
        req.blocks = units * cache.unit_blocks
        if not req.preemptions:  # vLLM reports the first admission's hit
            req.cached_tokens = hit
        return moved

    def _release(self, req: Request) -> None:
        """Free *req*'s KV; with a prefix cache its full units stay cached."""
        cache = self.cache
        if cache is None or not req.keys:
            self.kv.release(req.blocks)
            return
        kv = self.kv
        kv.release(-cache.insert(req, req.computed_tokens // cache.unit_tokens))
        kv.release(req.blocks - len(req.held) * cache.unit_blocks)  # its own blocks
        kv.release(cache.release(req))  # shared units nobody else uses

    def _finish(self, done: list[Request]) -> None:
        """Free and record requests that emitted their last token (at ``last_token_s``)."""
        for req in done:
            self._release(req)
            req.blocks = 0
            req.running = False
            self.running.remove(req)  # (a cluster's router may look at it in on_finish)
            self.collector.finish(req, req.last_token_s)
            self.source.on_finish(req.last_token_s)
        if self.on_free is not None:
            self.on_free()

    # -- fused runs (DESIGN §6): planned by engine.fused.plan_run, slept and committed here
    def _fused_run(
        self, origin: float, lead: float, start: float, rows: int, absorb: bool
    ) -> Process:
        """Advance every running request through decode iterations from *start* as one
        event; the clock reads *origin* (``origin + lead == start``: an iteration already
        committed may come first). Returns False, doing nothing, when the KV pool cannot
        hold the first iteration (the scheduler must preempt), and None when the next
        arrival is due within it (``strict_horizon``: step it instead).

        Carried across arrivals (:attr:`carry`: a cluster whose router reads the
        replicas' state), a run is planned up to a horizon of the dispatcher's choosing
        and is :attr:`live` while under way: the router reads the state it would have at
        each arrival from the plan (:meth:`~lyra_simpy.engine.fused.DecodeRun.state_at`),
        and :meth:`cut_run` ends it early when an arrival is routed here."""
        kv, dset = self.kv, self.decoding
        carry = self.carry
        if carry:
            assert self.routed is not None
            horizon = self.routed.carry_horizon_s()
        else:
            horizon = self.source.next_s()
        run = plan_run(
            dset, absorb, start, kv.used, kv.num_blocks, rows, self.cost, horizon,
            self.stop_s, self.strict_horizon and not carry,
        )  # fmt: skip
        if run is None:
            return False
        if not run.ends_s:
            return None  # the next arrival comes within the first iteration
        ends = run.ends_s
        # Land exactly on the unfused end time; if a rounding tie makes it unreachable
        # in one addition, end the run earlier (one step from *start* is always exact).
        k = len(ends)
        delay = exact_delay(origin, ends[k - 1])
        while delay is None and k > 1:
            k -= 1
            delay = exact_delay(origin, ends[k - 1])
        if delay is None:  # land on the run's start first (after a committed iteration)
            if lead:
                yield self.env.timeout(lead)
            delay = run.first_s
        run.truncate(k)
        # Each iteration holds its blocks from its start: an iteration still running at
        # the stop counts toward the peak, as in the unfused engine (only a run's first
        # iteration may be; the rest count once the run is committed: it may be cut).
        kv.note_peak(run.kv_blocks[0])
        if not carry:
            yield self.env.timeout(delay)
        else:
            self.live = run
            try:
                yield self.env.timeout(delay)
            except simpy.Interrupt as exc:  # cut_run: a request was routed here
                if exc.cause is not None:  # a failure: stop() ends the run
                    raise
                yield timeout_at(self.env, run.ends_s[-1])
            self.live = None
        kv.note_peak(max(run.kv_blocks))
        self._commit_run(run)
        return True

    def cut_run(self, now_s: float) -> None:
        """A request routed here arrives at *now_s* while a fused run carried across
        arrivals is under way (:attr:`live`): the run ends with the iteration running
        then, where a stepped engine would take the request."""
        run = self.live
        if run is not None and run.cut_at(now_s):
            assert self.process is not None
            self.process.interrupt()

    def stop(self) -> list[Request]:
        """The replica fails now (its process was interrupted with :data:`FAILURE`).

        The iterations that ended by now are committed: a fused run's, as stepping
        would have (a stepped iteration ending now was committed before any process
        acts, :data:`~lyra_simpy.engine.timing.PROCESS_PRIORITY`); the one in flight is
        lost, its tokens never emitted. Every request it holds leaves it and is returned
        — running (in admission order), waiting, deferred, then routed here and not yet
        taken — and its KV pool and prefix cache come back empty (cold)."""
        now = self.env.now
        run = self.live
        kv = self.kv
        if run is not None:
            self.live = None
            ends = run.ends_s
            k = bisect_right(ends, now)
            if k < len(ends) and (ends[k - 1] if k else run.start_s) < now:
                kv.note_peak(run.kv_blocks[k])  # in flight: it held its blocks
            if k:
                run.truncate(k)
                kv.note_peak(max(run.kv_blocks))
                self._commit_run(run)
        routed = self.routed
        held = [*self.running, *self.waiting, *self.intake.deferred]
        if routed is not None:
            held += routed.pop_until(float("inf"))
        self.running.clear()
        self.waiting.clear()
        self.intake.deferred.clear()
        self.decoding = DecodeSet(kv.block_size)
        self._rows = 0
        fresh = BlockPool(kv.num_blocks, kv.block_size)
        fresh.peak_used = kv.peak_used
        self.kv = fresh
        self.cache = self.cold_cache() if self.cold_cache is not None else None
        if self.cold_scheduler is not None:
            self.scheduler = self.cold_scheduler()
        fresh.attach(self.cache)
        return held

    def _commit_run(self, run: DecodeRun) -> None:
        """Emit the run's tokens: every member decodes until its last token or the end."""
        dset, collector = self.decoding, self.collector
        start, ends = run.start_s, run.ends_s
        last = dset.last_emit_s
        collector.itl(ends[0] - last, dset.n)  # everyone last emitted at *last*
        done = dset.advance(ends)
        # In use after the run: the last iteration's blocks less those of the requests
        # that finished in it (earlier finishers were freed inside the run). Told by the
        # clock, not by the time: iterations of zero cost end at the same time.
        final = dset.epoch
        used = run.kv_blocks[-1]
        if self.cache is not None:  # the run ended at its first finish: _finish frees
            self.kv.set_used(used)
        else:
            for req in done:
                if req.finish_epoch == final:
                    used -= req.blocks
                req.blocks = 0
            self.kv.set_used(used)
        if done:
            self._finish(done)
        collector.span(self.replica_id, ends, start, run.seqs, run.kv_blocks, len(self.waiting))
        weights = run.seqs[1:]
        if weights:
            collector.itl_pairs(list(map(sub, ends[1:], ends[:-1])), weights)
