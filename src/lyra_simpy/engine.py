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
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Generator
from itertools import accumulate
from operator import sub
from typing import Any

import numpy as np
import numpy.typing as npt
import simpy

from lyra_simpy.cost.base import BatchShape, CostModel
from lyra_simpy.errors import SimulationError
from lyra_simpy.kv import BlockPool
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
        # Hot path (one call per event): blocks_for() and Replica._emit() are inlined
        # in the per-request loops; the arithmetic is the same.
        kv = self.kv
        bs = kv.block_size
        waiting, running = self.waiting, self.running
        prefill = plan.prefill
        alloc = prefill_tokens = attention = 0
        for req, tokens in prefill:
            if not req.running:
                if waiting[0] is req:
                    waiting.popleft()
                else:
                    waiting.remove(req)
                req.running = True
                running.append(req)
            total = req.computed_tokens + tokens
            need = (total + bs - 1) // bs - req.blocks
            req.blocks += need
            alloc += need
            prefill_tokens += tokens
            attention += tokens * total
        decode = plan.decode
        n_dec = len(decode)
        context = 0
        k = 1
        hist: list[int] = []
        if self.fuse and not prefill and n_dec == len(running):
            # A span candidate: also find the shortest remaining output (the span's
            # length before cuts) and, per step offset modulo bs, how many requests
            # cross a block boundary there (hist[r]: requests whose context c_i + j
            # needs a new block at the steps j = r (mod bs), j >= 1).
            hist = [0] * bs
            k = n_left = decode[0].output_tokens - decode[0].generated_tokens
            for req in decode:
                comp = req.computed_tokens
                c = comp + 1
                context += c
                need = (c + bs - 1) // bs - req.blocks
                if need:
                    req.blocks += need
                    alloc += need
                hist[-comp % bs] += 1
                n_left = req.output_tokens - req.generated_tokens
                if n_left < k:
                    k = n_left
        else:
            for req in decode:
                c = req.computed_tokens + 1
                context += c
                need = (c + bs - 1) // bs - req.blocks
                if need:
                    req.blocks += need
                    alloc += need
        kv.allocate(alloc)
        rows = plan.rows if plan.rows > n_dec else n_dec
        if not prefill:
            durations = self.cost.decode_span_s(rows, context, n_dec, k)
            if k > 1:
                yield from self._span(decode, start, durations, hist)
                return
            duration = float(durations[0])
        else:
            duration = self.cost.iteration_s(
                BatchShape(len(prefill), prefill_tokens, attention, n_dec, rows, context)
            )
        yield self.env.timeout(duration)
        end: float = self.env.now
        collector = self.collector
        collector.iteration(
            self.replica_id,
            start,
            end,
            len(prefill) + n_dec,
            prefill_tokens,
            n_dec,
            kv.used,
            len(waiting),
        )
        common = 0
        done: list[Request] = []
        for req, tokens in prefill:
            req.computed_tokens += tokens
            if req.computed_tokens == req.input_tokens + req.generated_tokens:
                common += self._emit(req, start, end, done)
        itl = collector.itl
        for req in decode:  # _emit() inlined
            req.computed_tokens += 1
            gen = req.generated_tokens
            if gen == 0:
                req.first_token_s = end
            elif req.last_token_s == start:
                common += 1
            else:
                itl(end - req.last_token_s, 1)
            gen += 1
            req.generated_tokens = gen
            req.last_token_s = end
            if gen == req.output_tokens:
                done.append(req)
        if common:
            itl(end - start, common)
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
        self,
        decode: list[Request],
        start: float,
        durations: npt.NDArray[np.float64],
        hist: list[int],
    ) -> Generator[simpy.Event, Any, None]:
        """Advance up to ``len(durations)`` decode-only iterations as one event.

        Spans are short (a few to a few tens of iterations between arrivals and
        finishes), so this works on Python lists: ``itertools.accumulate`` adds left to
        right exactly as the unfused engine (and ``numpy.cumsum``) does, and a handful
        of C-level list operations cost less than NumPy's per-call overhead."""
        kv, bs = self.kv, self.kv.block_size
        ends = list(accumulate(durations.tolist(), initial=start))
        del ends[0]
        nxt = self.source.next_s()
        if nxt is not None:
            # The first iteration ending at or after the next arrival closes the span.
            del ends[bisect_left(ends, nxt) + 1 :]
        if self.stop_s is not None:
            # Iterations ending at or after the stop never complete (SimPy stops first).
            del ends[max(1, bisect_left(ends, self.stop_s)) :]
        k = len(ends)
        # KV growth: step j >= 1 adds hist[j % bs] blocks (see _execute); grown[j] is
        # what steps 1..j add (step 0 was allocated in _execute).
        inc = hist[:k] if k <= bs else (hist * (k // bs + 1))[:k]
        inc[0] = 0
        grown = list(accumulate(inc))
        if grown[-1] > kv.free:
            k = bisect_right(grown, kv.free)
        # Land exactly on the unfused end time; if a rounding tie makes it unreachable
        # in one addition, end the span earlier (one step is always exact).
        delay = exact_delay(start, ends[k - 1])
        while delay is None:
            k -= 1
            delay = exact_delay(start, ends[k - 1])
        del ends[k:]
        del grown[k:]
        end = ends[-1]
        yield self.env.timeout(delay)
        n = len(decode)
        collector = self.collector
        if collector.record_series:
            used = kv.used
            collector.span(
                self.replica_id, ends, start, n, [used + g for g in grown], len(self.waiting)
            )
        else:
            collector.span(self.replica_id, ends, start, n, [], 0)
        first_end = ends[0]
        common = 0
        added = 0
        done: list[Request] = []
        itl = collector.itl
        for req in decode:
            last = req.last_token_s
            if last == start:
                common += 1
            else:
                itl(first_end - last, 1)
            comp = req.computed_tokens + k
            req.computed_tokens = comp
            gen = req.generated_tokens + k
            req.generated_tokens = gen
            req.last_token_s = end
            b = (comp + bs - 1) // bs
            added += b - req.blocks
            req.blocks = b
            if gen == req.output_tokens:
                done.append(req)
        if common:
            itl(first_end - start, common)
        collector.itl_many(list(map(sub, ends[1:], ends[:-1])), n)
        kv.allocate(added)
        if done:
            self._finish(done, end)
