"""One engine iteration of a replica: allocate KV for its plan, charge the cost model
(:meth:`Iterations._step`; prompts beside the decodes, ``BatchPlan.beside``; a request
reaching the engine meanwhile, ``Rules.arrival_cost_s``), sleep, then emit its tokens
(:meth:`Iterations._commit`, :meth:`Iterations._emit`) and finish requests.

A mixin of :class:`~lyra_simpy.engine.replica.Replica`, kept apart so each module holds one
concept (the loop that plans lives in :mod:`~lyra_simpy.engine.replica`, fused runs in
:mod:`~lyra_simpy.engine.runs`); the attributes it reads are the replica's, declared here
for the type checker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from lyra_simpy.cost.base import BatchShape
from lyra_simpy.engine.request import RejectReason, Request
from lyra_simpy.engine.runs import Runs
from lyra_simpy.engine.speculative import Speculator
from lyra_simpy.engine.timing import Process, finite_time
from lyra_simpy.policies.base import BatchPlan


class HandOffPort(Protocol):
    """Where a prefill replica of a disaggregated cluster sends requests after their
    first token (:class:`~lyra_simpy.cluster.disagg.HandOff`)."""

    def refusal(self, req: Request) -> RejectReason | None:
        """Why no decode replica can ever take *req* (None: one can)."""
        ...

    def hand_off(self, req: Request, prefill: Iterations, now_s: float) -> None:
        """*req* emitted its first token on *prefill* at *now_s*: send its KV on."""
        ...


class Iterations(Runs):
    """Stepping one iteration and emitting its tokens (see the module)."""

    fuse: bool
    spec: Speculator | None
    handoff: HandOffPort | None
    arrival_cost_s: float
    idle_from: float | None
    wake_after_s: float
    wake_s: float
    _arrivals_before: Callable[[float], int] | None
    _prompts_s: float | None
    _lookahead: int
    _absorb: bool

    @property
    def _steady(self) -> bool:
        """Every running request is decoding."""
        return self.decoding.n == len(self.running)

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
        elif (
            prefill or plan.passes != 1 or plan.checkpoints or plan.output_passes != 1
            or plan.saved_tokens
        ):  # fmt: skip
            shape = BatchShape(
                len(prefill), prefill_tokens, attention, n_dec, rows, context, 0,
                plan.passes, plan.checkpoints, plan.prefill_attention_cells, plan.output_passes,
                plan.prefill_computed_cells, plan.pass_rows, plan.saved_tokens,
                plan.saved_reused_tokens,
            )  # fmt: skip
            duration = self.cost.iteration_s(shape)
        else:
            duration = self.cost.decode_span_s(rows, context, n_dec, 1)[0]
        if self.idle_from is not None:  # the first iteration after idle: the wake
            if start - self.idle_from >= self.wake_after_s:
                duration += self.wake_s
            self.idle_from = None
        before, cost = self._arrivals_before, self.arrival_cost_s
        if cost and before is not None:  # each request reaching the engine meanwhile
            charged, n = 0, before(start + duration)  # lengthens the iteration
            while n > charged:
                duration += (n - charged) * cost
                charged, n = n, before(start + duration)
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
