"""Static batching: form a batch, run it to completion, then form the next.

The classic request-level batching of early serving stacks (and of HF ``generate``):

* A batch starts when ``max_batch`` requests are waiting, or when the oldest waiting
  request has waited ``max_wait_ms`` (if set), or when no further arrival is known (so
  a finite workload always drains; in a cluster, no further arrival of the cluster's,
  which the router might send here — whether or not it routes ahead).
* All members are prefilled in one iteration (default), or ``prefills_per_iteration``
  at a time in prefill-only iterations (Lab 02's engine: "each iteration advances every
  sequence in the batch one decode step, or processes a prefill": a batch of 16 spends
  16 iterations on its prompts before its first decode), then decode together. A member that has
  produced all its tokens stops emitting but its row stays in the batch until the
  *longest* member finishes (head-of-line blocking): the cost model charges the rows
  of the whole batch (``BatchPlan.rows``), padded as configured.
* KV is reserved for every member's full length at batch formation (no preemption can
  occur); the batch takes waiting requests in the order of ``queue_policy`` (FCFS by
  default; :mod:`~lyra_simpy.policies.queue`) while their full lengths fit. The
  ``max_wait_ms`` clock is the oldest waiting request's, whatever the order.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, NonNegativeFloat, PositiveInt

from lyra_simpy.config import Closed
from lyra_simpy.engine.kv import blocks_for
from lyra_simpy.engine.request import RejectReason, Request
from lyra_simpy.policies.base import BatchPlan, EngineView
from lyra_simpy.policies.queue import QueuePolicy, ordered


class StaticConfig(Closed):
    """Knobs of static batching."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["static"] = "static"
    max_batch: PositiveInt = 16
    """Requests per batch."""
    max_wait_ms: NonNegativeFloat | None = None
    """Longest the oldest waiting request waits for the batch to fill (None: until full
    or until no further arrival is known)."""
    queue_policy: QueuePolicy = "fcfs"
    """Order in which waiting requests join a batch (see :mod:`~lyra_simpy.policies.queue`)."""
    prefills_per_iteration: PositiveInt | None = None
    """Members whose prompts one iteration computes (None: the whole batch in its first
    iteration). With a number, the batch's first iterations are prefill-only, that many
    members each, and the batch decodes once every member is prefilled: the rule of
    Lab 02's classroom engine (an iteration "advances every sequence in the batch one
    decode step, or processes a prefill"; with 1, one request per prefill)."""

    @property
    def token_budget(self) -> int | None:
        """No token budget: a batch's prompts run whole."""
        return None

    @property
    def alone_chunk_tokens(self) -> int | None:
        """Whole prompts (None)."""
        return None


class StaticBatching:
    """Run-to-completion batches of up to ``max_batch`` requests."""

    holds_back_until_change = True
    """A new batch forms only once the running one has ended (see ``Scheduler``)."""
    fusable = True
    """Decode iterations may be fused (``Scheduler``)."""

    def __init__(self, config: StaticConfig) -> None:
        self.config = config
        self._rows = 0
        self._unfilled: list[Request] = []
        """Members of the running batch whose prompts are still to be computed."""

    @property
    def max_batch(self) -> int:
        """Most requests it runs at once (``Scheduler``)."""
        return self.config.max_batch

    def refusal(
        self, request: Request, num_blocks: int, block_size: int, prompt_only: bool = False
    ) -> RejectReason | None:
        # A batch reserves each member's full length at formation, on any replica.
        full = blocks_for(request.input_tokens + request.output_tokens, block_size)
        return "never_fits_kv" if full > num_blocks else None

    def plan(self, view: EngineView) -> BatchPlan:
        if self._unfilled:
            return self._prefill_next(BatchPlan(rows=self._rows))
        if view.running:
            return BatchPlan(decode=list(view.running), rows=self._rows)
        waiting = view.waiting
        if not waiting:
            return BatchPlan()
        cfg = self.config
        full = len(waiting) >= cfg.max_batch
        deadline = (
            None if cfg.max_wait_ms is None else waiting[0].arrival_s + cfg.max_wait_ms / 1000.0
        )
        if not (
            full or not view.arrivals_pending or (deadline is not None and deadline <= view.now_s)
        ):
            return BatchPlan(wait_until_s=deadline)
        plan = BatchPlan()
        # Reserve each member's full length up front; the engine allocates only the
        # prompt now, so the rest is kept back by counting it against the free blocks.
        free = view.free_blocks
        for req in ordered(waiting, cfg.queue_policy):
            if len(self._unfilled) == cfg.max_batch:
                break
            full_blocks = blocks_for(req.input_tokens + req.output_tokens, view.block_size)
            if full_blocks > free:
                break
            free -= full_blocks
            self._unfilled.append(req)
        self._rows = plan.rows = len(self._unfilled)
        return self._prefill_next(plan)

    def _prefill_next(self, plan: BatchPlan) -> BatchPlan:
        """*plan* with the next members' prompts (all of them by default). The members
        not yet prefilled stay in the waiting queue, their KV kept back: no other
        request joins until the batch ends."""
        k = self.config.prefills_per_iteration or len(self._unfilled)
        plan.prefill = [(req, req.input_tokens) for req in self._unfilled[:k]]
        del self._unfilled[:k]
        return plan
