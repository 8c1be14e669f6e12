"""The replica process: one SimPy timeout per engine iteration (or per fused span).

Each loop: take the arrivals that are due, ask the scheduler for a plan, allocate KV,
charge the cost model, sleep for the iteration, then emit tokens, finish requests and
free their blocks. An idle replica sleeps until the next known arrival (no polling).

*Fused spans* (DESIGN §6). When the plan is decode-only over every running request, the
batch cannot change until the earliest of: a request finishes, the next arrival is due,
or the KV pool runs out of blocks. Those *k* iterations are advanced as one event. Their
end times come from a sequential cumulative sum of the same per-iteration durations the
unfused engine uses, arrivals are cut at the first iteration that ends at or after them
(the unfused engine admits an arrival at the first scheduling point at or after it),
and the time series, ITL pairs and KV counts are expanded exactly; ``fuse_iterations:
false`` steps one by one and a test checks both give byte-identical results.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from lyra_simpy.cost.base import BatchShape, CostModel
from lyra_simpy.errors import SimulationError
from lyra_simpy.kv import BlockPool, blocks_for
from lyra_simpy.metrics.collector import Collector
from lyra_simpy.policies.base import BatchPlan, EngineView, Scheduler
from lyra_simpy.request import Request
from lyra_simpy.workload.source import Source


def exact_delay(now: float, target: float) -> float | None:
    """A delay *d* with ``now + d == target`` in floating point (None if no float does
    it: a rounding tie can skip *target*). Fused spans land on exactly the times the
    unfused engine reaches by adding durations one by one."""
    d = target - now
    for _ in range(4):
        reached = now + d
        if reached == target:
            return d
        d = math.nextafter(d, math.inf if reached < target else -math.inf)
    return None


def _delay(now: float, target: float) -> float:
    """Delay to sleep until *target* (idle waits: the nearest float is fine there)."""
    d = exact_delay(now, target)
    return target - now if d is None else d


class Replica:
    """One serving engine: a scheduler, a KV pool and a cost model, fed by a source."""

    def __init__(
        self,
        env: simpy.Environment,
        replica_id: int,
        scheduler: Scheduler,
        cost: CostModel,
        kv: BlockPool,
        source: Source,
        collector: Collector,
        fuse: bool = True,
        stop_s: float | None = None,
    ) -> None:
        self.env = env
        self.replica_id = replica_id
        self.scheduler = scheduler
        self.cost = cost
        self.kv = kv
        self.source = source
        self.collector = collector
        self.fuse = fuse
        self.stop_s = stop_s
        """The run stops here (``env.run(until=...)``): a span never runs past it."""
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    # -- process --------------------------------------------------------------------
    def run(self) -> Generator[simpy.Event, Any, None]:
        env, source = self.env, self.source
        while True:
            now: float = env.now
            self._pull(now)
            if not self.running and not self.waiting:
                nxt = source.next_s()
                if nxt is None:
                    if source.done:
                        return
                    raise SimulationError("replica idle while the source waits on it")
                yield env.timeout(_delay(now, nxt))
                continue
            view = EngineView(
                now,
                self.waiting,
                self.running,
                self.kv.free,
                self.kv.block_size,
                source.next_s() is not None,
            )
            plan = self.scheduler.plan(view)
            if plan.preempt:
                self._preempt(plan)
            if plan.empty:
                if plan.preempt:
                    continue
                target = plan.wait_until_s
                nxt = source.next_s()
                if nxt is not None and (target is None or nxt < target):
                    target = nxt
                if target is None or target <= now:
                    raise SimulationError("scheduler ran nothing and gave nothing to wait for")
                yield env.timeout(_delay(now, target))
                continue
            yield from self._execute(plan, now)

    def _pull(self, now: float) -> None:
        fits = self.scheduler.accepts
        # A rejection ends a closed-loop request at once; its client's next request may
        # be due now too, so take arrivals until none is due.
        while due := self.source.pop_until(now):
            for req in due:
                self.collector.assign(req, self.replica_id)
                if fits(req, self.kv.num_blocks, self.kv.block_size):
                    self.waiting.append(req)
                else:
                    self.collector.reject(req)
                    self.source.on_finish(now)

    def _preempt(self, plan: BatchPlan) -> None:
        for victim in plan.preempt:
            self.kv.release(victim.blocks)
            victim.blocks = 0
            victim.computed_tokens = 0
            victim.preemptions += 1
            victim.running = False
            self.running.remove(victim)
            self.waiting.appendleft(victim)

    # -- one iteration or one fused span --------------------------------------------
    def _execute(self, plan: BatchPlan, start: float) -> Generator[simpy.Event, Any, None]:
        bs = self.kv.block_size
        waiting, running = self.waiting, self.running
        alloc = prefill_tokens = attention = 0
        for req, tokens in plan.prefill:
            if not req.running:
                if waiting[0] is req:
                    waiting.popleft()
                else:
                    waiting.remove(req)
                req.running = True
                running.append(req)
            need = blocks_for(req.computed_tokens + tokens, bs) - req.blocks
            req.blocks += need
            alloc += need
            prefill_tokens += tokens
            attention += tokens * (req.computed_tokens + tokens)
        decode = plan.decode
        n_dec = len(decode)
        context = 0
        for req in decode:
            c = req.computed_tokens + 1
            context += c
            need = blocks_for(c, bs) - req.blocks
            if need:
                req.blocks += need
                alloc += need
        self.kv.allocate(alloc)
        rows = max(n_dec, plan.rows)
        if not plan.prefill:
            k = 1
            if self.fuse and n_dec == len(running):
                k = min(r.output_tokens - r.generated_tokens for r in decode)
            durations = self.cost.decode_span_s(rows, context, n_dec, k)
            if k > 1:
                yield from self._span(decode, start, durations)
                return
            duration = float(durations[0])
        else:
            duration = self.cost.iteration_s(
                BatchShape(len(plan.prefill), prefill_tokens, attention, n_dec, rows, context)
            )
        yield self.env.timeout(duration)
        end: float = self.env.now
        self.collector.iteration(
            self.replica_id,
            start,
            end,
            len(plan.prefill) + n_dec,
            prefill_tokens,
            n_dec,
            self.kv.used,
            len(waiting),
        )
        common = 0
        done: list[Request] = []
        for req, tokens in plan.prefill:
            req.computed_tokens += tokens
            if req.computed_tokens == req.input_tokens + req.generated_tokens:
                common += self._emit(req, start, end, done)
        for req in decode:
            req.computed_tokens += 1
            common += self._emit(req, start, end, done)
        if common:
            self.collector.itl(end - start, common)
        if done:
            self._finish(done, end)

    def _emit(self, req: Request, start: float, end: float, done: list[Request]) -> int:
        """Emit one token of *req* at *end*; returns 1 when its ITL equals the iteration."""
        common = 0
        if req.generated_tokens == 0:
            req.first_token_s = end
        elif req.last_token_s == start:
            common = 1
        else:
            self.collector.itl(end - req.last_token_s, 1)
        req.generated_tokens += 1
        req.last_token_s = end
        if req.generated_tokens == req.output_tokens:
            done.append(req)
        return common

    def _finish(self, done: list[Request], end: float) -> None:
        for req in done:
            self.kv.release(req.blocks)
            req.blocks = 0
            req.running = False
            self.collector.finish(req, end)
            self.source.on_finish(end)
        self.running[:] = [r for r in self.running if r.running]

    def _span(
        self, decode: list[Request], start: float, durations: np.ndarray
    ) -> Generator[simpy.Event, Any, None]:
        """Advance up to ``len(durations)`` decode-only iterations as one event."""
        kv, bs = self.kv, self.kv.block_size
        ends = np.cumsum(np.concatenate(([start], durations)))[1:]
        k = len(ends)
        nxt = self.source.next_s()
        if nxt is not None:
            k = min(k, int(np.searchsorted(ends, nxt, side="left")) + 1)
        if self.stop_s is not None:
            # Iterations ending at or after the stop never complete (SimPy stops first).
            k = max(1, min(k, int(np.searchsorted(ends, self.stop_s, side="left"))))
        # KV growth: after step 0 (already allocated) request i holds c_i + j tokens at
        # step j and needs a new block whenever c_i + j - 1 is a multiple of bs.
        c = np.fromiter((r.computed_tokens + 1 for r in decode), dtype=np.int64, count=len(decode))
        need_all = int(((c + k - 1 + bs - 1) // bs).sum()) - int(((c + bs - 1) // bs).sum())
        series = self.collector.record_series
        if need_all > kv.free or series:
            hist = np.bincount((1 - c) % bs, minlength=bs)
            steps = np.arange(k)
            inc = hist[steps % bs]
            inc[0] = 0
            grown = np.cumsum(inc)
            if need_all > kv.free:
                k = int(np.searchsorted(grown, kv.free, side="right"))
        else:
            grown = None
        # Land exactly on the unfused end time; if a rounding tie makes it unreachable
        # in one addition, end the span earlier (one step is always exact).
        delay = exact_delay(start, float(ends[k - 1]))
        while delay is None:
            k -= 1
            delay = exact_delay(start, float(ends[k - 1]))
        if grown is not None:
            grown = grown[:k]
        ends = ends[:k]
        end = float(ends[-1])
        yield self.env.timeout(delay)
        n = len(decode)
        if grown is not None:
            self.collector.span(self.replica_id, ends, start, n, kv.used + grown, len(self.waiting))
        else:
            self.collector.span(self.replica_id, ends, start, n, np.zeros(0, np.int64), 0)
        first_end = float(ends[0])
        common = 0
        added = 0
        done: list[Request] = []
        for req in decode:
            if req.last_token_s == start:
                common += 1
            else:
                self.collector.itl(first_end - req.last_token_s, 1)
            req.computed_tokens += k
            req.generated_tokens += k
            req.last_token_s = end
            b = blocks_for(req.computed_tokens, bs)
            added += b - req.blocks
            req.blocks = b
            if req.generated_tokens == req.output_tokens:
                done.append(req)
        if common:
            self.collector.itl(first_end - start, common)
        self.collector.itl_many(np.diff(ends), n)
        kv.allocate(added)
        if done:
            self._finish(done, end)
